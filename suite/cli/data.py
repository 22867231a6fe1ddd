"""``dlsuite data ...``: make the suite's dataset, look at any dataset, drop one from the cache.

    dlsuite data make [--size quick|full] [--format folder,webdataset,tfrecord,recordio]
                      [--data-dir D] [--seed N] [--classes N] [--images N] [--force] [--json]
    dlsuite data info PATH [--scan [N]] [--json]
    dlsuite data evict PATH [--json]

The data directory: ``--data-dir`` > ``DLSUITE_DATA_DIR`` > ``--config``'s ``[run] data_dir`` >
``--site``'s ``data_dir`` > ``~/.cache/dlsuite/data`` (:mod:`suite.datasets.location`).
Host side: no framework (the packed formats' writers run in their environments).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from suite.cli.common import ArgumentParser, csv
from suite.cli.options import add_flag
from suite.datasets.location import DataDir, resolve_data_dir
from suite.settings import setting

#: above this many files, ``info`` reads the page-cache state of a seeded sample of them
RESIDENT_SAMPLE = 20_000


def add_parser(sub: Any, parsers: dict[str, ArgumentParser]) -> ArgumentParser:
    d = sub.add_parser(
        "data", help="datasets of the training level: make the suite's, inspect or evict any"
    )
    ds = d.add_subparsers(dest="data_command", required=True)
    mk = ds.add_parser("make", help="make (or reuse) the seeded ImageNet-like image set")
    mk.add_argument("--size", choices=("quick", "full"), default="quick",
                    help="quick: 2,000 images of 100 classes; full: 50,000 of 1,000")  # fmt: skip
    mk.add_argument(
        "--format", dest="formats", type=csv, default=["folder"],
        help="folder (ImageFolder JPEGs, always made), webdataset, tfrecord, recordio "
        "(comma-separated; each written by its framework in its environment)",
    )  # fmt: skip
    mk.add_argument("--seed", type=int, default=0, help="the generator's seed (default 0)")
    mk.add_argument("--classes", type=int, help="override the size's number of classes")
    mk.add_argument("--images", type=int, help="override the size's number of images")
    mk.add_argument("--force", action="store_true", help="make it again even if it is there")
    mk.add_argument("--workers", type=int, help="processes rendering images (default: every core)")
    add_flag(mk, setting("data_dir"))
    add_flag(mk, setting("config"), help="a config file whose [run] data_dir applies")
    add_flag(mk, setting("site"), help="a site profile whose data_dir applies")
    mk.add_argument("--json", action="store_true", help="print the manifest as JSON")

    inf = ds.add_parser("info", help="a dataset's layout, size, digest, storage and cache state")
    inf.add_argument("path", metavar="PATH", help="a dataset directory or shard (as for --data)")
    inf.add_argument(
        "--scan", nargs="?", type=int, const=0, default=None, metavar="N",
        help="decode the images to find corrupt ones: all (--scan alone, or 0), or a seeded "
        "sample of N",
    )  # fmt: skip
    add_flag(inf, setting("label_base"), choices=(0, 1))
    add_flag(
        inf, setting("data_dir"),
        help="where a packed dataset's index is cached (indexes/; default as for `data make`)",
    )  # fmt: skip
    inf.add_argument("--json", action="store_true", help="machine-readable output")

    ev = ds.add_parser("evict", help="drop a dataset's files from the page cache (no root)")
    ev.add_argument("path", metavar="PATH", help="a dataset directory or shard")
    ev.add_argument("--json", action="store_true", help="machine-readable output")
    return d


def main(args: argparse.Namespace, argv: list[str]) -> int:
    if args.data_command == "make":
        return _make(args)
    from suite.errors import ConfigError

    # the loaders' checks name --data, which the user of `data info PATH` (or `data evict
    # PATH`) did not type
    try:
        return _info(args) if args.data_command == "info" else _evict(args)
    except ConfigError as exc:
        raise ConfigError(str(exc).removeprefix("--data ")) from None


def _make(args: argparse.Namespace) -> int:
    from suite.datasets import formats as F
    from suite.datasets import make as M

    where = from_settings(args.data_dir, args.config, args.site)
    if args.workers is not None and args.workers < 1:
        from suite.errors import ConfigError

        raise ConfigError(f"--workers {args.workers}: give a positive number of processes")
    console = Console(stderr=True)
    update, close = M.rich_progress()
    try:
        ds = F.make_dataset(
            where.path, args.size, args.formats, seed=args.seed, classes=args.classes,
            images=args.images, progress=update, force=args.force,
            say=lambda s: console.print(s),
        )  # fmt: skip
    finally:
        close()
    if args.json:
        print(json.dumps({"path": str(ds.path), "reused": ds.reused, **ds.manifest}, indent=2))
        return 0
    Console().print(summary_table(ds.path, ds.manifest))
    print(ds.path)
    return 0


def summary_table(path: Path, m: dict[str, Any]) -> Table:
    """The dataset's statistics beside ImageNet's, and its formats' bytes on disk."""
    from suite.datasets.make import human_bytes

    j, ref, mk = m["jpeg"], m["imagenet_reference"], m["making"]
    t = Table(title=f"{m['name']}  ({m['images']} images, {m['classes']} classes)")
    t.add_column("")
    t.add_column("this dataset", justify="right")
    t.add_column("ImageNet train", justify="right")
    t.add_row("mean bytes per JPEG", human_bytes(j["mean_bytes"]), human_bytes(ref["mean_bytes"]))
    t.add_row("median bytes per JPEG", human_bytes(j["median_bytes"]), "")
    t.add_row("p5 / p95 bytes", f"{human_bytes(j['p5_bytes'])} / {human_bytes(j['p95_bytes'])}", "")
    top = j["common_sizes"][0]
    t.add_row(
        "most common size",
        f"{top['width']}x{top['height']} ({top['share']:.0%})",
        "x".join(str(v) for v in ref["typical_size"]),
    )
    t.add_row("mean size", f"{j['mean_width']:.0f}x{j['mean_height']:.0f}", "")
    t.add_row("bits per pixel", f"{j['bits_per_pixel']:.2f}", "")
    t.add_row("JPEG quality", str(m["generator"]["jpeg_quality"]), str(ref["jpeg_quality"]))
    t.add_row(
        "made in",
        f"{mk['seconds']:.1f} s ({mk['images_per_s']:.0f} images/s, {mk['workers']} processes)",
        "",
    )
    for fmt, e in m["formats"].items():
        rb = e.get("read_back")
        check = f", read back: {'ok' if rb['passed'] else 'FAILED'}" if rb else ""
        t.add_row(f"{fmt} on disk", f"{human_bytes(e['bytes'])} in {e['files']} files{check}", "")
    return t


def _detected(path: str, data_dir: str | None = None) -> Any:
    from suite.datasets.layout import detect
    from suite.levels.training.dataset import index_cache_dir

    return detect(path, cache_dir=index_cache_dir(data_dir))


def _info(args: argparse.Namespace) -> int:
    from suite.datasets import storage
    from suite.datasets.layout import content_digest, empty_shard_notes, scan_jpegs
    from suite.datasets.make import human_bytes, list_digest, rich_progress
    from suite.errors import ConfigError
    from suite.levels.training import dataset as D

    if args.scan is not None and args.scan < 0:
        raise ConfigError(f"--scan {args.scan}: give the number of images to sample, or --scan "
                          "alone (or 0) to decode them all")  # fmt: skip
    data_dir = str(from_settings(args.data_dir).path) if args.data_dir else None
    ds = _detected(args.path, data_dir)
    root = ds.path
    files = ds.files
    out: dict[str, Any] = ds.to_dict()
    if ds.listing:
        out["listing"] = ds.listing
    out["format"] = ds.format
    if ds.layout == "suite":
        files = [f for sub in ds.formats.values() for f in sub.files]
        out["manifest"] = {
            k: ds.manifest.get(k) for k in ("name", "params", "jpeg", "making", "digest")
        } if ds.manifest else None  # fmt: skip
    if ds.digest:  # computed with the cached listing
        out["digest"] = ds.digest
    elif ds.relpaths is not None and ds.sizes is not None:  # found while listing: no 2nd stat
        out["digest"] = list_digest(list(zip(ds.relpaths, ds.sizes, strict=True)))
    else:
        out["digest"] = content_digest(files, root)
    index = None
    if ds.layout in ("tfrecord", "recordio", "webdataset"):
        index, how = D.packed_index(ds, data_dir)
        base, why = D.label_base_of(index, args.label_base, args.path)
        out.update(samples=index.samples, classes=index.classes(), index=how, label_base=base,
                   label_base_source=why, labels=[int(index.label.min()), int(index.label.max())],
                   shards=len(index.files))  # fmt: skip
        out["notes"] = [*(out.get("notes") or []), *index.notes, *D.label_notes(index, base),
                        *empty_shard_notes(index.files, index.shard_counts())]  # fmt: skip
    elif ds.classes:  # an ImageFolder, the suite's own: labels are the class folders' places
        if args.label_base == 1:  # as `run` refuses it (suite/config.py)
            what = ("an ImageFolder, whose labels are its sorted class folders' positions"
                    if ds.layout == "imagefolder" else "a suite dataset, whose labels")  # fmt: skip
            raise ConfigError(
                f"--label-base 1: {args.path} is {what} from 0; --label-base is for packed "
                "datasets whose stored labels may count from 1 (TFRecord, RecordIO, "
                "WebDataset): drop it"
            )
        out.update(label_base=0, labels=[0, len(ds.classes) - 1],
                   label_base_source="the sorted class folders' positions")  # fmt: skip
    out["read_by"] = {fmt: D.readers_of(fmt) for fmt in ds.held_formats()}
    out["benchmarks"] = _data_benchmarks()
    out["storage"] = storage.storage_facts(root)
    chosen = files
    if len(files) > RESIDENT_SAMPLE:
        chosen = random.Random(0).sample(files, RESIDENT_SAMPLE)
    res, total = storage.resident_bytes(chosen)
    out["page_cache"] = {
        "resident_share": res / total if total else 0.0,
        "files_checked": len(chosen),
        "method": "mincore over a read-only mapping of each file",
    }
    if args.scan is not None:
        images = (ds.formats["folder"].files if ds.layout == "suite" and "folder" in ds.formats
                  else ds.files if ds.layout == "imagefolder" else [])  # fmt: skip
        update, close = rich_progress(tty_only=True)  # thousands of files: minutes
        try:
            if images:
                out["scan"] = scan_jpegs(images, sample=args.scan or None, progress=update)
            elif index is not None:
                out["scan"] = scan_packed(index, sample=args.scan or None, progress=update)
            else:
                out["scan"] = {"skipped": f"{ds.layout}: no reader of this version decodes it"}
        finally:
            close()
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    t = Table(title=str(root), show_header=False)
    t.add_row("layout", ds.layout + (f" ({', '.join(ds.formats)})" if ds.formats else ""))
    t.add_row("format", ", ".join(ds.held_formats()))
    t.add_row("files", f"{len(files):,} ({human_bytes(ds.bytes)})")
    if out.get("samples") is not None:
        t.add_row("samples", f"{out['samples']:,}")
    if out.get("classes") is not None:
        t.add_row("classes", f"{out['classes']:,}")
    if ds.listing:
        t.add_row("listing", ds.listing)
    if out.get("labels"):
        t.add_row("labels", f"{out['labels'][0]}..{out['labels'][1]}, {out['label_base']}-based "
                            f"({out['label_base_source']})")  # fmt: skip
    if index is not None:
        t.add_row("index", out["index"])
    for fmt, who in out["read_by"].items():
        t.add_row(f"{fmt} read by", ", ".join(who) if who else
                  "no registered adapter: convert it (e.g. to an ImageFolder)")  # fmt: skip
    if any(out["read_by"].values()):
        t.add_row("benchmarks", ", ".join(out["benchmarks"]) + " (training level, --data PATH)")
    st = out["storage"]
    t.add_row("file system", f"{st['fs_type']} at {st['mount_point']} ({st['mount_source']})")
    t.add_row("block device", st["block_device"] or st.get("block_device_reason", ""))
    pc = out["page_cache"]
    t.add_row("in the page cache", f"{pc['resident_share']:.1%} (of {pc['files_checked']:,} files)")
    t.add_row("digest (names, sizes)", out["digest"][:16])
    for note in out.get("notes") or []:
        t.add_row("note", note)
    if "scan" in out:
        sc = out["scan"]
        t.add_row(
            "corrupt images", sc.get("skipped") or f"{sc['corrupt']} of {sc['checked']:,} decoded"
        )
        for bad in sc.get("corrupt_files", [])[:5]:
            where = f"{bad['file']} ({bad['path']})" if "file" in bad else bad["path"]
            t.add_row("", f"{where}: {bad['error'][:80]}")
    Console().print(t)
    return 0


def _data_benchmarks() -> list[str]:
    """The training level's benchmarks that read a dataset (their ``data`` field)."""
    from suite.levels import benchmark_names, load_benchmark

    return [b for b in benchmark_names("training")
            if "data" in getattr(load_benchmark("training", b), "fields", {})]  # fmt: skip


def scan_packed(
    index: Any, sample: int | None = None, seed: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Decode a packed dataset's images (all, or a seeded sample) read through its index;
    the corrupt ones listed by their key. ``progress(what, done, total)`` is told as it goes."""
    import io

    from PIL import Image

    from suite.datasets.layout import (
        SCAN_PROGRESS_EVERY,
        TF_IMAGE_FORMATS,
        decode_error,
        tensorflow_decodes,
    )
    from suite.datasets.packed import reader_of

    read = reader_of(index.layout)
    ids = list(range(index.samples))
    if sample is not None and sample < len(ids):
        ids = sorted(random.Random(seed).sample(ids, sample))
    bad: list[dict[str, str]] = []
    for n, i in enumerate(ids):
        if progress and n % SCAN_PROGRESS_EVERY == 0:
            progress("decoding images", n, len(ids))
        try:
            data = read(index, i)
            with Image.open(io.BytesIO(data)) as im:
                im.load()
                kind = im.format
        except Exception as exc:  # noqa: BLE001 - every failure to decode is a corrupt sample
            shard = index.files[int(index.shard[i])]
            bad.append({"path": index.keys[i], "file": shard,
                        "error": decode_error(exc, f"{shard}: {index.keys[i]}")})  # fmt: skip
            continue
        if index.layout == "tfrecord" and not tensorflow_decodes(data):
            # only TensorFlow reads TFRecord, and its decode_image fails the whole task on it
            bad.append({"path": index.keys[i], "file": index.files[int(index.shard[i])],
                        "error": f"a {kind} image, which TensorFlow's "
                        f"decode_image does not read ({', '.join(TF_IMAGE_FORMATS)} only): "
                        "re-encode it as JPEG or PNG"})  # fmt: skip
    if progress:
        progress("decoding images", len(ids), len(ids))
    return {"checked": len(ids), "of": index.samples, "sampled": len(ids) < index.samples,
            "decoded": True, "corrupt": len(bad), "corrupt_files": bad[:100]}  # fmt: skip


def _evict(args: argparse.Namespace) -> int:
    from suite.datasets import storage
    from suite.datasets.layout import JoinedPaths

    ds = _detected(args.path)
    subs = list(ds.formats.values()) if ds.layout == "suite" else [ds]
    paths: list[str | Path] = []
    for sub in subs:  # an ImageFolder's paths as strings: no Path per file
        paths += sub.files.strings() if isinstance(sub.files, JoinedPaths) else list(sub.files)
    result = storage.evict(paths)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        from suite.datasets.make import human_bytes

        if result["verified"]:
            print(f"evicted {result['files']} files ({human_bytes(result['bytes'])}): "
                  f"{result['resident_after_share']:.1%} still resident")  # fmt: skip
        else:
            print(f"not evicted: {result['reason']}")
    return 0 if result["verified"] else 1


def from_settings(
    flag: str | None, config_file: str | None = None, site: str | None = None
) -> DataDir:
    """:func:`resolve_data_dir` with the config file and site profile read and validated
    (``dlsuite data ... --config FILE --site NAME``)."""
    config_value = site_value = None
    if config_file:
        from suite import config

        doc = config.load_file(config_file)
        config_value = doc.get("run", {}).get("data_dir")
    if site:
        from suite import sites

        site_value = getattr(sites.load(site), "data_dir", None)
    return resolve_data_dir(flag, config_value=config_value, site_value=site_value)
