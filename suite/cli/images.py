"""``dlsuite images ...``: build, list and convert the framework images (see suite/images.py).

dlsuite images build [--framework F ...] [--base IMAGE] [--wheelhouse DIR [--prepare-wheelhouse]]
                     [--ca-bundle FILE] [--tag T] [--index-url URL] [--extra-index-url URL]
dlsuite images list [--json]
dlsuite images base [--tarball FILE] [--tag T] [--suite bookworm] [--mirror URL]
dlsuite images sif --framework F [--tag T] [--dir DIR]
dlsuite images dockerfiles [--check]      containers/<F>/Dockerfile from containers/Dockerfile.in
dlsuite images apptainer-def [--check]    containers/<F>/Apptainer.def from the Dockerfile (spython)
dlsuite images context --framework F DIR  the build context, for a by-hand docker/apptainer build
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from suite.cli.common import ArgumentParser, csv


def add_parser(sub: Any, parsers: dict[str, ArgumentParser]) -> ArgumentParser:
    im = sub.add_parser(
        "images", help="framework images: build (Docker SDK), list, Apptainer SIFs and defs"
    )
    ims = im.add_subparsers(dest="images_command", required=True)

    b = ims.add_parser("build", help="build dlsuite/<framework>:<tag> through the Docker SDK")
    b.add_argument(
        "--framework", dest="frameworks", type=csv, action="extend",
        help="framework(s), comma-separated or repeated (default: every recipe in containers/)",
    )  # fmt: skip
    b.add_argument(
        "--base",
        help="BASE_IMAGE: a CUDA image for GPU clusters, a Debian one for CPUs "
        "(default debian:bookworm-slim; `dlsuite images base` makes dlsuite/base:debian-bookworm)",
    )
    b.add_argument(
        "--wheelhouse",
        type=Path,
        help="install only from this directory of wheels (pip --no-index --find-links), "
        "served to the build over HTTP on the loopback",
    )
    b.add_argument(
        "--prepare-wheelhouse",
        action="store_true",
        help="first fill --wheelhouse on this host (pip download of the recipe, the suite's "
        "dependencies and its build backend; uses this host's pip configuration)",
    )
    b.add_argument(
        "--wheel-python",
        help="with --prepare-wheelhouse: the image's Python version when it differs from this "
        "host's (e.g. 3.12 for an Ubuntu 24.04 CUDA base)",
    )
    b.add_argument(
        "--ca-bundle",
        type=Path,
        help="an extra CA bundle the image trusts (a site behind a TLS-inspecting proxy)",
    )
    b.add_argument("--tag", help="image tag (default: DLSUITE_IMAGE_TAG, else the suite version)")
    b.add_argument("--index-url", help="PIP_INDEX_URL inside the build")
    b.add_argument("--extra-index-url", help="PIP_EXTRA_INDEX_URL inside the build")
    b.add_argument("--trusted-host", help="PIP_TRUSTED_HOST inside the build")
    b.add_argument("--uid", type=int, default=1000, help="uid of the image's user (default 1000)")
    b.add_argument("--quiet", action="store_true", help="only the steps, not every output line")
    b.add_argument(
        "--rebuild",
        action="store_true",
        help="build even when an image of the same context and arguments exists",
    )

    ls = ims.add_parser("list", help="local images labelled dlsuite.framework")
    ls.add_argument("--json", action="store_true", help="machine-readable output")

    ba = ims.add_parser(
        "base", help="bootstrap a Debian base image from Debian's archive (debootstrap + import)"
    )
    ba.add_argument(
        "--tarball",
        type=Path,
        help="root file system tarball, made if missing "
        "(default: ~/.cache/dlsuite/images/base-debian-<suite>.tar)",
    )
    ba.add_argument("--tag", help="default dlsuite/base:debian-<suite>")
    ba.add_argument("--suite", default="bookworm", help="Debian suite (default bookworm)")
    ba.add_argument("--mirror", help="Debian mirror (default: this machine's apt source)")

    sf = ims.add_parser("sif", help="Apptainer SIF from the Docker image (docker save + build)")
    sf.add_argument("--framework", dest="frameworks", type=csv, action="extend", required=True)
    sf.add_argument("--tag", help="image tag (default: DLSUITE_IMAGE_TAG, else the suite version)")
    sf.add_argument(
        "--dir", type=Path, help="where F.sif goes (default: DLSUITE_IMAGE_DIR, else ~/.cache/...)"
    )
    sf.add_argument("--keep-archive", action="store_true", help="keep the docker save tarball")

    for name, what in (
        ("dockerfiles", "containers/<F>/Dockerfile from containers/Dockerfile.in"),
        ("apptainer-def", "containers/<F>/Apptainer.def from the Dockerfile (spython)"),
    ):
        g = ims.add_parser(name, help=f"regenerate {what}")
        g.add_argument("--framework", dest="frameworks", type=csv, action="extend")
        g.add_argument(
            "--check", action="store_true", help="change nothing; exit 1 if a file is out of sync"
        )

    cx = ims.add_parser("context", help="stage a framework's build context in a directory")
    cx.add_argument("--framework", required=True)
    cx.add_argument("dest", type=Path, metavar="DIR")
    cx.add_argument("--ca-bundle", type=Path)
    return im


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from suite import images

    command = args.images_command
    if command == "build":
        return _build(args)
    if command == "list":
        return _list(args)
    if command == "base":
        return _base(args)
    if command == "sif":
        return _sif(args)
    if command == "context":
        images.check_frameworks([args.framework])
        print(images.stage_context(args.framework, args.dest, args.ca_bundle))
        return 0
    sync = images.sync_dockerfiles if command == "dockerfiles" else images.sync_apptainer_defs
    stale = sync(args.frameworks, check=args.check)
    if args.check:
        for path in stale:
            print(f"{path}: out of sync; run `dlsuite images {command}`", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        print(f"wrote {path}")
    return 0


def _build(args: argparse.Namespace) -> int:
    from suite import images
    from suite.errors import ConfigError

    frameworks = images.check_frameworks(args.frameworks)
    if args.prepare_wheelhouse and not args.wheelhouse:
        raise ConfigError("--prepare-wheelhouse: say where with --wheelhouse DIR")
    console = Console(stderr=True, highlight=False)
    opts = images.BuildOptions(
        base=args.base or images.DEFAULT_BASE,
        tag=args.tag,
        index_url=args.index_url,
        extra_index_url=args.extra_index_url,
        trusted_host=args.trusted_host,
        uid=args.uid,
    )
    failed = 0
    results = []
    for fw in frameworks:
        wheelhouse = args.wheelhouse.resolve() if args.wheelhouse else None
        if wheelhouse is not None and args.prepare_wheelhouse:
            console.print(f"[bold]{fw}[/]: filling the wheelhouse {wheelhouse}")
            t0 = time.perf_counter()
            images.prepare_wheelhouse(
                fw, wheelhouse, args.wheel_python, say=lambda s: console.print(f"  {s}")
            )
            console.print(f"  done in {time.perf_counter() - t0:.0f} s")
        ref = images.image_ref(fw, args.tag)
        console.print(f"[bold]{fw}[/]: building {ref} from {opts.base}")
        with console.status(f"{fw}: starting") as status:
            t0 = time.perf_counter()

            def on_line(line: str, status: Any = status, t0: float = t0, fw: str = fw) -> None:
                if line.startswith("Step "):
                    status.update(f"{fw}: {line[:100]} ({time.perf_counter() - t0:.0f} s)")
                    console.print(f"  [cyan]{line[:160]}[/]", markup=True)
                elif not args.quiet and not line.startswith((" ---> ", "Removing intermediate")):
                    console.print(f"  {line}", markup=False, style="dim")

            try:
                result = images.build(
                    fw,
                    opts,
                    wheelhouse=wheelhouse,
                    ca_bundle=args.ca_bundle,
                    rebuild=args.rebuild,
                    on_line=on_line,
                )
            except images.ImageError as exc:
                console.print(f"[red]{fw}: {exc}[/]", markup=False)
                failed += 1
                continue
        results.append(result)
        console.print(
            f"[green]{fw}[/]: {result.ref} {result.image_id[:19]} "
            f"{result.size_mb:.0f} MB in {result.seconds:.0f} s (log: {result.log})"
        )
    for r in results:
        print(f"{r.ref}\t{r.image_id}\t{r.size_mb:.0f} MB\t{r.seconds:.0f} s")
    return 1 if failed else 0


def _list(args: argparse.Namespace) -> int:
    from suite import images

    rows = images.list_images()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="dlsuite images")
    for col in ("image", "id", "frameworks", "cuda", "revision", "created", "size"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["ref"],
            r["id"].split(":")[-1][:12],
            r["frameworks"] or "",
            r["cuda"] or "",
            (r["revision"] or "")[:12],
            r["created"],
            f"{r['size_mb']:.0f} MB",
        )
    Console(width=None if sys.stdout.isatty() else 180).print(table)
    return 0


def _base(args: argparse.Namespace) -> int:
    from suite import images

    tag = args.tag or f"dlsuite/base:debian-{args.suite}"
    tarball = args.tarball or images.default_image_dir() / f"base-debian-{args.suite}.tar"
    if not tarball.is_file():
        print(f"bootstrapping Debian {args.suite} into {tarball} (debootstrap, about a minute)")
        if images.bootstrap_base(tarball, args.suite, args.mirror).returncode != 0:
            raise images.ImageError("containers/base/bootstrap.sh failed (see its output above)")
    image_id = images.import_base(tarball, tag)
    print(f"{tag}\t{image_id}")
    return 0


def _sif(args: argparse.Namespace) -> int:
    from suite import images

    failed = 0
    for fw in images.check_frameworks(args.frameworks):
        t0 = time.perf_counter()
        try:
            sif = images.build_sif(
                fw, args.tag, args.dir, keep_archive=args.keep_archive, on_line=print
            )
        except images.ImageError as exc:
            print(f"dlsuite: error: {fw}: {exc}", file=sys.stderr)
            failed += 1
            continue
        size = sif.stat().st_size / 2**20
        print(f"{sif}\t{size:.0f} MB\t{time.perf_counter() - t0:.0f} s")
    return 1 if failed else 0
