"""``dlsuite reframe config|references``: a ReFrame system configuration from a site profile, and
the references each of its partitions gets (the ReFrame code itself: suite/reframe/)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.cli.common import ArgumentParser, csv
from suite.cli.common import console as cli_console
from suite.errors import ConfigError
from suite.reframe.config import (
    MODULES_SYSTEMS,
    SLURM_SCHEDULERS,
    check_with_reframe,
    default_references,
    render,
    rfm_name,
    select_partitions,
    site_configuration,
)

if TYPE_CHECKING:
    from suite.references import Reference


def add_parser(sub: Any, parsers: dict[str, ArgumentParser]) -> ArgumentParser:
    rf = sub.add_parser(
        "reframe", help="ReFrame: a system configuration from a site profile, and its references"
    )
    rfs = rf.add_subparsers(dest="reframe_command", required=True)
    c = rfs.add_parser(
        "config", help="write a ReFrame system configuration (Python) from a site profile"
    )
    c.add_argument("--site", required=True, help="site profile: a name in sites/ or a .toml path")
    c.add_argument(
        "--partition", dest="partitions", type=csv, action="extend",
        help="only these site partitions (comma-separated or repeated; default all)",
    )  # fmt: skip
    c.add_argument("--system", help="ReFrame system name (default: the site's name)")
    c.add_argument(
        "--hostname", dest="hostnames", action="append",
        help="a regular expression of the hosts this system runs on, repeated (default .*)",
    )  # fmt: skip
    c.add_argument(
        "--slurm-scheduler", default="squeue", choices=SLURM_SCHEDULERS,
        help="ReFrame's Slurm scheduler for a Slurm site: squeue (default: polls squeue, needs "
        "no accounting) or slurm (sacct: needs slurmdbd)",
    )  # fmt: skip
    c.add_argument(
        "--modules-system", dest="modules_system",
        help=f"how ReFrame loads the site's modules: {', '.join(MODULES_SYSTEMS)} (default lmod "
        "when the site lists modules, else none)",
    )  # fmt: skip
    c.add_argument(
        "--results-db", dest="results_db",
        help="ReFrame's results database (default its own, ~/.reframe/reports/results.db)",
    )  # fmt: skip
    c.add_argument("--out", help="write the file here (default: standard output)")
    c.add_argument(
        "--no-check", dest="check", action="store_false",
        help="do not have ReFrame load the configuration (it needs no ReFrame then)",
    )  # fmt: skip
    r = rfs.add_parser(
        "references", help="the suite's references each ReFrame partition of a site gets"
    )
    r.add_argument("--site", required=True, help="site profile: a name in sites/ or a .toml path")
    r.add_argument("--partition", dest="partitions", type=csv, action="extend")
    r.add_argument(
        "--references", action="append",
        help="references files or directories (default: the checkout's references/)",
    )  # fmt: skip
    return rf


def _config_main(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from suite import sites

    site = sites.load(args.site)
    cfg = site_configuration(
        site,
        partitions=args.partitions,
        system=args.system,
        hostnames=args.hostnames or (".*",),
        slurm_scheduler=args.slurm_scheduler,
        modules_system=args.modules_system,
        results_db=args.results_db,
    )
    text = render(cfg, site, argv)
    system = cfg["systems"][0]["name"]
    if args.out:
        out = Path(args.out)
        if out.suffix != ".py":
            raise ConfigError(f"--out {out}: a ReFrame configuration written here ends in .py")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        if args.check:
            check_with_reframe(out, system)
        print(f"wrote {out}: system {system}, partitions "
              f"{', '.join(p['name'] for p in cfg['systems'][0]['partitions'])}", file=sys.stderr)  # fmt: skip
        return 0
    if args.check:
        with tempfile.TemporaryDirectory(prefix="dlsuite-rfm-") as tmp:
            path = Path(tmp) / "config.py"
            path.write_text(text, encoding="utf-8")
            check_with_reframe(path, system)
    sys.stdout.write(text)
    return 0


def _references_main(args: argparse.Namespace) -> int:
    from rich.table import Table

    from suite import sites
    from suite.references import load_references
    from suite.reframe.checks import partition_device

    site = sites.load(args.site)
    refs = load_references([Path(p) for p in args.references or [default_references()]])
    console = cli_console()
    system = rfm_name(site.name)
    for p in select_partitions(site, args.partitions):
        device = partition_device(p)
        t = Table(title=f"{system}:{rfm_name(p.name)} (device {device or 'not declared'})")
        for col in ("level", "benchmark", "framework", "dtype", "params", "metric", "reference",
                    "bounds", "source"):  # fmt: skip
            t.add_column(col, overflow="fold")
        n = 0
        for ref in refs:
            if not _applies(ref, device):
                continue
            n += 1
            low = "-inf" if ref.lower is None else f"{ref.lower:+.0%}"
            high = "+inf" if ref.upper is None else f"{ref.upper:+.0%}"
            t.add_row(
                ref.level, ref.benchmark, ref.framework or "any", ref.dtype or "any",
                ",".join([f"{k}={v}" for k, v in sorted(ref.params.items())]
                         + ([f"ranks={ref.world_size}"] if ref.world_size else [])) or "any",
                ref.metric, f"{ref.value:g} {ref.unit or ''}".strip(), f"{low} / {high}",
                ref.source,
            )  # fmt: skip
        if n:
            console.print(t)
        else:
            console.print(f"{system}:{rfm_name(p.name)}: no reference applies (device "
                          f"{device or 'not declared'}; declare \\[partitions.{p.name}] "
                          "device in the site profile)")  # fmt: skip
    return 0


def _applies(ref: Reference, device: dict[str, Any] | None) -> bool:
    """Whether ``ref``'s device keys match a partition's declared ``device``."""
    from suite.reframe.checks import partition_references

    return bool(
        partition_references(
            [ref], device, level=ref.level, benchmark=ref.benchmark,
            framework=ref.framework or "", dtype=ref.dtype or "",
        )
    )  # fmt: skip


def main(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
    if args.reframe_command == "config":
        return _config_main(args, argv)
    return _references_main(args)
