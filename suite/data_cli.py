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
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from suite.datasets.location import DataDir, resolve_data_dir

#: above this many files, ``info`` reads the page-cache state of a seeded sample of them
RESIDENT_SAMPLE = 20_000


def add_parser(sub: Any, csv: Any) -> None:
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
    for p in (mk,):
        p.add_argument("--data-dir", dest="data_dir", help="where datasets live (see `--help`)")
        p.add_argument("--config", help="a config file whose [run] data_dir applies")
        p.add_argument("--site", help="a site profile whose data_dir applies")
    mk.add_argument("--json", action="store_true", help="print the manifest as JSON")

    inf = ds.add_parser("info", help="a dataset's layout, size, digest, storage and cache state")
    inf.add_argument("path", metavar="PATH", help="a dataset directory or shard (as for --data)")
    inf.add_argument(
        "--scan", nargs="?", type=int, const=0, default=None, metavar="N",
        help="decode the images to find corrupt ones: all, or a seeded sample of N",
    )  # fmt: skip
    inf.add_argument("--json", action="store_true", help="machine-readable output")

    ev = ds.add_parser("evict", help="drop a dataset's files from the page cache (no root)")
    ev.add_argument("path", metavar="PATH", help="a dataset directory or shard")
    ev.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    if args.data_command == "make":
        return _make(args)
    if args.data_command == "info":
        return _info(args)
    return _evict(args)


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


def _detected(path: str) -> Any:
    from suite.datasets.layout import detect

    return detect(path)


def _info(args: argparse.Namespace) -> int:
    from suite.datasets import storage
    from suite.datasets.layout import content_digest, scan_jpegs

    ds = _detected(args.path)
    root = ds.path
    files = ds.files
    out: dict[str, Any] = ds.to_dict()
    if ds.layout == "suite":
        files = [f for sub in ds.formats.values() for f in sub.files]
        out["manifest"] = {
            k: ds.manifest.get(k) for k in ("name", "params", "jpeg", "making", "digest")
        } if ds.manifest else None  # fmt: skip
    out["digest"] = content_digest(files, root)
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
        if images:
            out["scan"] = scan_jpegs(images, sample=args.scan or None)
        else:
            out["scan"] = {"skipped": f"{ds.layout}: the loaders count corrupt records as they "
                                      "decode them"}  # fmt: skip
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    from suite.datasets.make import human_bytes

    t = Table(title=str(root), show_header=False)
    t.add_row("layout", ds.layout + (f" ({', '.join(ds.formats)})" if ds.formats else ""))
    t.add_row("files", f"{len(files)} ({human_bytes(sum(f.stat().st_size for f in files))})")
    if ds.samples is not None:
        t.add_row("samples", str(ds.samples))
    if ds.classes is not None:
        t.add_row("classes", str(len(ds.classes)))
    st = out["storage"]
    t.add_row("file system", f"{st['fs_type']} at {st['mount_point']} ({st['mount_source']})")
    t.add_row("block device", st["block_device"] or st.get("block_device_reason", ""))
    pc = out["page_cache"]
    t.add_row("in the page cache", f"{pc['resident_share']:.1%} (of {pc['files_checked']} files)")
    t.add_row("digest (names, sizes)", out["digest"][:16])
    for note in ds.notes:
        t.add_row("note", note)
    if "scan" in out:
        s = out["scan"]
        t.add_row("corrupt images", s.get("skipped") or f"{s['corrupt']} of {s['checked']} decoded")
    Console().print(t)
    return 0


def _evict(args: argparse.Namespace) -> int:
    from suite.datasets import storage

    ds = _detected(args.path)
    files = ds.files
    if ds.layout == "suite":
        files = [f for sub in ds.formats.values() for f in sub.files]
    result = storage.evict([str(f) for f in files])
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
