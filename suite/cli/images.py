"""``dlsuite images ...``: build, list and convert the framework images (see suite/images.py).

dlsuite images build [--framework F ...] [--base IMAGE] [--wheelhouse DIR [--prepare-wheelhouse]]
                     [--ca-bundle FILE] [--tag T] [--index-url URL] [--extra-index-url URL]
dlsuite images list [--json]
dlsuite images base [--tarball FILE] [--tag T] [--suite bookworm] [--mirror URL]
dlsuite images sif --framework F|all [--tag T] [--dir DIR] [--no-check|--check-only] [--user U]
dlsuite images dockerfiles [--check]      containers/<F>/Dockerfile from containers/Dockerfile.in
dlsuite images apptainer-def [--check]    containers/<F>/Apptainer.def from the Dockerfile (spython)
dlsuite images context --framework F DIR  the build context, for a by-hand docker/apptainer build
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
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
    b.add_argument(
        "--variant",
        help="a recipe's variant: cuda (its requirements-cuda.txt, the GPU build from PyPI's "
        "wheels), tagged <tag>-cuda",
    )
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

    ls = ims.add_parser(
        "list",
        help="local images labelled dlsuite.framework, and the SIFs in DLSUITE_IMAGE_DIR",
    )
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

    sf = ims.add_parser(
        "sif",
        help="Apptainer SIF from the Docker image (docker save + build), then a check task "
        "in it with --backend apptainer as an unprivileged user",
    )
    sf.add_argument(
        "--framework", dest="frameworks", type=csv, action="extend", required=True,
        help="framework(s), comma-separated or repeated; all: every recipe in containers/",
    )  # fmt: skip
    sf.add_argument("--tag", help="image tag (default: DLSUITE_IMAGE_TAG, else the suite version)")
    sf.add_argument(
        "--dir", type=Path, help="where F.sif goes (default: DLSUITE_IMAGE_DIR, else ~/.cache/...)"
    )
    sf.add_argument("--keep-archive", action="store_true", help="keep the docker save tarball")
    sf.add_argument(
        "--variant",
        help="the variant's image (dlsuite/F:<tag>-cuda) into F-cuda.sif, which --backend "
        "apptainer takes for tasks on cuda; its checks run on cuda (not run without a GPU)",
    )
    what = sf.add_mutually_exclusive_group()
    what.add_argument(
        "--no-check", action="store_true", help="build only: run no check task in the SIFs"
    )
    what.add_argument(
        "--check-only",
        action="store_true",
        help="build nothing: run the check tasks in the SIFs already in --dir",
    )
    sf.add_argument(
        "--check-out",
        type=Path,
        help="where the check runs go (default: a new directory dlsuite-sif-check-* in /tmp)",
    )
    sf.add_argument(
        "--user",
        help="as root: the unprivileged user the checks run as, as clusters run Apptainer "
        "(default dlsuite-check, created when missing)",
    )
    sf.add_argument(
        "--from-def",
        action="store_true",
        help="build with Apptainer alone, no Docker daemon and no registry: "
        "containers/<F>/Apptainer.def from the base SIF (containers/base/Apptainer.def, "
        "debootstrap from Debian's archive), with --fakeroot (as root: as --user)",
    )
    sf.add_argument(
        "--base-sif",
        type=Path,
        help=f"with --from-def: the base SIF (default DIR/{'dlsuite-base.sif'}, built when missing)",
    )
    sf.add_argument("--mirror", help="with --from-def: the Debian mirror of the base")
    sf.add_argument(
        "--wheelhouse",
        type=Path,
        help="with --from-def: pip installs from this directory alone (served on the loopback)",
    )
    sf.add_argument(
        "--prepare-wheelhouse",
        action="store_true",
        help="with --from-def --wheelhouse: first fill it on this host (pip download)",
    )
    sf.add_argument("--ca-bundle", type=Path, help="with --from-def: an extra CA bundle")
    sf.add_argument(
        "--python",
        help="the interpreter (with the suite's dependencies) the checks' `dlsuite run` uses; "
        "default this one, or where the check's user cannot run it, a virtual environment of "
        "the system's python3 made for it under /var/tmp",
    )

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
    if args.uid < 1:  # install.sh refuses it too, but only after the build has started
        raise ConfigError(
            f"--uid {args.uid}: the image's user `dlsuite` must be unprivileged (not root); "
            "give a uid above 0, e.g. your own (`id -u`) or 1000, the default"
        )
    console = Console(stderr=True, highlight=False)
    opts = images.BuildOptions(
        base=args.base or images.DEFAULT_BASE,
        tag=args.tag,
        index_url=args.index_url,
        extra_index_url=args.extra_index_url,
        trusted_host=args.trusted_host,
        uid=args.uid,
        variant=args.variant,
    )
    for fw in frameworks:  # a variant a recipe lacks, a bad tag: one line before any build
        images.requirements_path(fw, args.variant)
        images.image_ref(fw, args.tag, args.variant)
    # no daemon, a base that is neither here nor pullable: one line, before any wheelhouse
    images.ensure_base(images.docker_client(), opts.base, say=console.print)
    failed = 0
    results = []
    for fw in frameworks:
        wheelhouse = args.wheelhouse.resolve() if args.wheelhouse else None
        if wheelhouse is not None and args.prepare_wheelhouse:
            console.print(f"[bold]{fw}[/]: filling the wheelhouse {wheelhouse}")
            t0 = time.perf_counter()
            images.prepare_wheelhouse(
                fw, wheelhouse, args.wheel_python,
                say=lambda s: console.print(f"  {s}", markup=False), variant=args.variant,
            )  # fmt: skip
            console.print(f"  done in {time.perf_counter() - t0:.0f} s")
        ref = images.image_ref(fw, args.tag, args.variant)
        console.print(f"[bold]{fw}[/]: building {ref} from {opts.base}")
        with console.status(f"{fw}: starting") as status:
            t0 = time.perf_counter()

            def on_line(line: str, status: Any = status, t0: float = t0, fw: str = fw) -> None:
                if line.startswith("Step "):
                    status.update(f"{fw}: {line[:100]} ({time.perf_counter() - t0:.0f} s)")
                    console.print(f"  {line[:160]}", markup=False, style="cyan")
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
                console.print(f"{fw}: {exc}", markup=False, style="red")
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

    directory = images.image_dir()
    try:
        rows = images.list_images()
        missing = None
    except images.ImageError as exc:  # no Docker here (a login node), but SIFs may be
        rows, missing = [], exc
    sifs = images.list_sifs(directory)
    if missing is not None:
        if not sifs:
            raise images.ImageError(
                f"{missing}; and no SIF in {directory} either (the image directory: "
                "DLSUITE_IMAGE_DIR, else ~/.cache/dlsuite/images)"
            )
        print(f"dlsuite: note: {missing}; the SIFs in {directory} only", file=sys.stderr)
    rows += sifs
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="dlsuite images")
    for col in ("image", "id", "frameworks", "variant", "cuda", "revision", "created", "size"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["ref"],
            r["id"].split(":")[-1][:12],  # "sif" for a SIF
            r["frameworks"] or "",
            r["variant"],
            r["cuda"] or "",
            (r["revision"] or "")[:12],
            r["created"],
            f"{r['size_mb']:.0f} MB",
        )
    Console(width=None if sys.stdout.isatty() else 180).print(table)
    return 0


def _base(args: argparse.Namespace) -> int:
    from suite import images

    images.check_mirror(args.mirror, args.suite)
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
    import tempfile

    from suite import images
    from suite.backends.container import gpus_present
    from suite.errors import ConfigError

    frameworks = images.check_frameworks(args.frameworks)
    for fw in frameworks:
        if args.variant:
            images.requirements_path(fw, args.variant)
        images.image_ref(fw, args.tag, args.variant)  # a tag Docker would refuse: one line now
    console = Console(stderr=True, highlight=False)
    directory = (args.dir or images.image_dir()).resolve()
    user = None
    checks = not args.no_check
    dim = lambda s: console.print(f"  {s}", markup=False, style="dim")  # noqa: E731
    if not args.from_def:
        for given in ("base_sif", "mirror", "wheelhouse", "ca_bundle"):
            if getattr(args, given):
                raise ConfigError(f"--{given.replace('_', '-')} goes with --from-def")
    if args.prepare_wheelhouse and not args.wheelhouse:
        raise ConfigError("--prepare-wheelhouse: say where with --wheelhouse DIR")
    images.check_mirror(args.mirror)  # it becomes text in the base definition's %post
    if args.check_only:
        # nothing to check is bad input, told before a check directory or user is made
        missing = [
            fw for fw in frameworks if not (directory / images.sif_name(fw, args.variant)).is_file()
        ]
        if missing:
            where = f" --dir {shlex.quote(str(directory))}" if args.dir else ""
            variant = f" --variant {args.variant}" if args.variant else ""
            there = [fw for fw in frameworks if fw not in missing]
            raise ConfigError(
                f"--check-only: no SIF for {', '.join(missing)} in {directory}; build it: "
                f"dlsuite images sif --framework {','.join(missing)}{variant}{where}"
                + (f" (or check those there: --framework {','.join(there)})" if there else "")
            )
    if not args.check_only and not args.from_def:
        # every SIF is made from a Docker image: no daemon (or one this user may not use) and
        # no apptainer are one line each, exit 2, once (as for `images build`)
        images.docker_client()
        images.apptainer_binary()
    if checks and args.variant == images.CUDA and not gpus_present():
        console.print(
            f"no NVIDIA GPU here: the checks of {images.sif_name('F', args.variant)} run on "
            "cuda, so none is run (the SIFs are built)"
        )
        checks = False
    if checks or args.from_def:
        images.apptainer_binary()
        user = images.check_user(args.user, say=lambda s: console.print(s, markup=False))
    if checks:
        if args.python:
            python = args.python
            images.check_suite_runs_as(user, python)
        else:
            python = images.check_interpreter(user, say=lambda s: console.print(s, markup=False))
        out = args.check_out or Path(tempfile.mkdtemp(prefix="dlsuite-sif-check-", dir="/tmp"))
        out = out.resolve()
        out.mkdir(parents=True, exist_ok=True)
        if user is not None:
            os.chown(out, user.uid, user.gid)
    rows: list[dict[str, Any]] = []
    failed = 0
    base_sif = None
    if args.from_def and not args.check_only:
        base_sif = (args.base_sif or directory / images.BASE_SIF).resolve()
        if not base_sif.is_file():
            base_row: dict[str, Any] = {"framework": "(base)", "sif": str(base_sif)}
            rows.append(base_row)
            t0 = time.perf_counter()
            with console.status(f"{base_sif.name}: debootstrap from Debian's archive"):
                images.build_base_sif(base_sif, user, mirror=args.mirror, on_line=dim)
            base_row.update(
                build_s=round(time.perf_counter() - t0, 1),
                size_mb=round(base_sif.stat().st_size / 2**20, 1),
                digest=images.sif_digest(base_sif),
            )
            console.print(
                f"[green]{base_sif}[/] {base_row['size_mb']:.0f} MB in {base_row['build_s']:.0f} s"
            )
    for fw in frameworks:
        sif = directory / images.sif_name(fw, args.variant)
        row: dict[str, Any] = {"framework": fw, "variant": args.variant, "sif": str(sif)}
        rows.append(row)
        if not args.check_only:
            t0 = time.perf_counter()
            how = (
                "apptainer build Apptainer.def"
                if args.from_def
                else "docker save + apptainer build"
            )
            with console.status(f"{fw}: {how}"):
                try:
                    if base_sif is not None:
                        _from_def(images, args, fw, directory, base_sif, user, console, dim)
                    else:
                        images.build_sif(
                            fw, args.tag, directory, keep_archive=args.keep_archive,
                            on_line=dim, variant=args.variant,
                        )  # fmt: skip
                except images.ImageError as exc:
                    console.print(f"{fw}: {exc}", markup=False, style="red")
                    row["error"] = str(exc)
                    failed += 1
                    continue
            row["build_s"] = round(time.perf_counter() - t0, 1)
        if not sif.is_file():
            where = f" --dir {shlex.quote(str(directory))}" if args.dir else ""
            row["error"] = f"no SIF {sif}; build it: dlsuite images sif --framework {fw}{where}"
            console.print(f"{fw}: {row['error']}", markup=False, style="red")
            failed += 1
            continue
        row.update(size_mb=round(sif.stat().st_size / 2**20, 1), digest=images.sif_digest(sif))
        console.print(f"[green]{fw}[/]: {sif} {row['size_mb']:.0f} MB {row['digest'][:19]}")
        if not checks:
            continue
        sif = images.user_readable(sif, user, out / fw / "images", say=dim)
        row["checks"] = []
        for i, check in enumerate(images.sif_checks(fw, args.variant)):
            with console.status(f"{fw}: {check.name} in {sif.name}"):
                result = images.run_sif_check(
                    fw, sif, check, out / fw / f"check{i}", user,
                    on_line=dim, python=python,
                )  # fmt: skip
            row["checks"].append(_check_row(result))
            colour = "green" if result.passed else "red"
            console.print(
                f"[{colour}]{fw}: {check.name}: {result.ok}/{result.records} ok, "
                f"{result.correct} correct, {result.digest_named} naming the SIF's digest, "
                f"{result.seconds:.0f} s[/]"
            )
            for problem in result.problems or []:
                console.print(f"  {problem}", markup=False)
            failed += not result.passed
    _sif_table(rows, checks)
    if checks:
        summary = {
            "user": user.name if user else None,
            "uid": user.uid if user else os.geteuid(),
            "sif_dir": str(directory),
            "frameworks": rows,
        }
        (out / "sif-summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        print(f"check runs and their summary: {out} (sif-summary.json)")
    return 1 if failed else 0


def _from_def(
    images: Any, args: argparse.Namespace, fw: str, directory: Path, base_sif: Path,
    user: Any, console: Console, dim: Any,
) -> None:  # fmt: skip
    wheelhouse = args.wheelhouse.resolve() if args.wheelhouse else None
    if wheelhouse is not None and args.prepare_wheelhouse:
        console.print(f"{fw}: filling the wheelhouse {wheelhouse}")
        images.prepare_wheelhouse(fw, wheelhouse, say=dim, variant=args.variant)
    opts = images.BuildOptions(tag=args.tag, variant=args.variant)
    images.build_sif_from_def(
        fw, opts, directory, base_sif, user, wheelhouse=wheelhouse, ca_bundle=args.ca_bundle,
        on_line=dim,
    )  # fmt: skip


def _check_row(result: Any) -> dict[str, Any]:
    return {
        "check": result.check,
        "out": str(result.out),
        "returncode": result.returncode,
        "seconds": round(result.seconds, 1),
        "records": result.records,
        "ok": result.ok,
        "correct": result.correct,
        "digest_named": result.digest_named,
        "passed": result.passed,
        "problems": result.problems,
    }


def _sif_table(rows: list[dict[str, Any]], checks: bool) -> None:
    table = Table(title="SIFs" + (" and their checks (--backend apptainer)" if checks else ""))
    for col in ("framework", "size", "build", "check", "records", "result"):
        table.add_column(col)
    for row in rows:
        size = f"{row['size_mb']:.0f} MB" if "size_mb" in row else ""
        build = f"{row['build_s']:.0f} s" if "build_s" in row else ""
        if "error" in row:
            table.add_row(
                row["framework"], size, build, "", "", f"[red]{escape(row['error'][:80])}[/]"
            )
            continue
        for i, c in enumerate(row.get("checks") or [{}]):
            verdict = ""
            if c:
                verdict = (
                    f"[green]ok, correct, digest {row['digest'][7:19]}[/]"
                    if c["passed"]
                    else f"[red]{c['ok']} ok, {c['correct']} correct of {c['records']}[/]"
                )
            first = i == 0
            table.add_row(
                row["framework"] if first else "", size if first else "", build if first else "",
                c.get("check", ""), str(c.get("records", "")), verdict,
            )  # fmt: skip
    Console(width=None if sys.stdout.isatty() else 160).print(table)
