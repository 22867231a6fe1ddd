"""``dlsuite project``: the command line of the projection (registered by ``suite/cli/__init__.py``).

dlsuite project RUN [RUN...] --ranks 2,8,64,512 [--site PROFILE | --gpus-per-node N
    --intra-bw BW --inter-bw BW --latency LAT --inter-link KIND] [--check RUN...]
    [--out FILE.json] [--details]
dlsuite project --published [FILE]     # the published results of published.toml (or FILE)

Exit code 0 when at least one row could be projected, 2 when none could (every row says why).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape

from suite.cli.common import ArgumentParser
from suite.cli.common import console as cli_console
from suite.errors import ConfigError


def _ranks(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(" ", "").split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of rank counts (e.g. 2,8,64)"
        ) from None
    return values


def writable(path: Path, flag: str) -> None:
    """A ConfigError naming ``flag`` when ``path`` cannot be written (a directory, a folder
    that does not exist or takes no files), found by making and removing a file beside it,
    so nothing is left when the projection later refuses its input."""
    import tempfile

    if path.is_dir():
        raise ConfigError(
            f"{flag} {path}: a directory; give the path of a file in it, e.g. "
            f"{path / 'projection.json'}"
        )
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=True):
            pass
        if path.exists() and not os.access(path, os.W_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot write it ({exc.strerror})") from None


def add_parser(sub: Any, parsers: dict[str, ArgumentParser]) -> ArgumentParser:
    """Register ``project`` on the CLI's subparsers."""
    pj = sub.add_parser(
        "project",
        help="project a run's distributed records to other rank counts and hardware "
        "(alpha-beta collectives, compute per step, overlap), or the published results",
    )
    pj.add_argument("run_dirs", nargs="*", metavar="RUN", help="run directories (or results.jsonl)")
    pj.add_argument(
        "--ranks",
        type=_ranks,
        default=[2, 8, 64, 512],
        help="rank counts to project to (default 2,8,64,512)",
    )
    pj.add_argument(
        "--fit-ranks",
        dest="fit_ranks",
        type=_ranks,
        help="fit to the training records (data_parallel, strategies) of these world "
        "sizes only; one-rank compute and every collective sweep are always used",
    )
    pj.add_argument(
        "--check",
        nargs="+",
        default=[],
        metavar="RUN",
        help="runs only compared with the projection, never fitted to",
    )
    pj.add_argument(
        "--site",
        help="a site profile whose [network] table gives GPUs per node and "
        "the links (sites/<name>.toml or a path)",
    )
    pj.add_argument("--gpus-per-node", dest="gpus_per_node", type=int, help="ranks per node")
    pj.add_argument(
        "--intra-bw",
        dest="intra_bw",
        metavar="BW",
        help='line rate inside a node, e.g. "300 GB/s" (NVLink; GB/s bytes, Gbit/s bits)',
    )
    pj.add_argument(
        "--inter-bw",
        dest="inter_bw",
        metavar="BW",
        help='line rate between nodes, e.g. "200 Gbit/s" (HDR)',
    )
    pj.add_argument(
        "--latency", help='both links\' latency, e.g. "2 us" (s, ms, us or µs, ns; above 0)'
    )
    pj.add_argument(
        "--intra-latency",
        dest="intra_latency",
        metavar="LATENCY",
        help="the latency inside a node (wins over --latency there)",
    )
    pj.add_argument(
        "--inter-latency",
        dest="inter_latency",
        metavar="LATENCY",
        help="the latency between nodes (wins over --latency there)",
    )
    pj.add_argument(
        "--intra-link",
        dest="intra_kind",
        metavar="KIND",
        help="the kind of link inside a node (nvlink, pcie-host, ...): the share of the "
        "--intra-bw line rate it achieves is the published one for the kind",
    )
    pj.add_argument(
        "--inter-link",
        dest="inter_kind",
        metavar="KIND",
        help="the kind of link between nodes: ethernet (TCP), roce, infiniband; "
        "without it a given bandwidth has no usable band",
    )
    pj.add_argument(
        "--algorithm",
        help="ring, halving-doubling, tree or nccl (default: NCCL's own choice on an nccl "
        "backend, the best fit where the records span several world sizes, else ring)",
    )
    pj.add_argument(
        "--nccl-version",
        dest="nccl_version",
        help="the NCCL version at the target (default: the records'); before 2.4 NCCL has no tree",
    )
    pj.add_argument(
        "--cycle-time",
        dest="cycle_ms",
        type=float,
        help="Horovod's HOROVOD_CYCLE_TIME in ms (default: the records' where the run's "
        "environment set it, else 1, Horovod's since 0.21)",
    )
    pj.add_argument(
        "--step-spread",
        dest="step_spread",
        type=float,
        metavar="SIGMA",
        help="one rank's step-time spread at the target (sigma over the median, e.g. 0.003): a "
        "synchronous step waits for the slowest of its ranks (default: the one-rank records' "
        "own samples; 0 leaves stragglers out)",
    )
    pj.add_argument(
        "--accept-busy",
        dest="accept_busy",
        action="store_true",
        help="fit to records the quiet-machine check called busy (each such row says so); "
        "without it their rows are not projected",
    )
    pj.add_argument(
        "--details",
        action="store_true",
        help="also print the fitted links and the predicted-vs-measured table",
    )
    pj.add_argument(
        "--overlap",
        default="auto",
        help="auto (measured where a multi-rank record allows; else none on a CPU node "
        "whose cores the ranks fill, timeline elsewhere), timeline, none, full, or a hidden "
        "share 0..1",
    )
    pj.add_argument(
        "--bucket",
        help="bytes per gradient bucket at the target, e.g. 25MiB (a bare number is bytes; "
        "default: the records' bucket, else the framework's: DDP 25 MiB, Horovod's fusion "
        "threshold 128 MiB); the records are still fitted at the bucket they ran with",
    )
    pj.add_argument("--servers", type=int, default=1, help="parameter servers (default 1)")
    pj.add_argument(
        "--compute-from",
        dest="compute_from",
        nargs="+",
        default=[],
        metavar="RUN",
        help="take compute per step from these runs' one-rank records (measured "
        "elsewhere, e.g. on the target GPU)",
    )
    pj.add_argument(
        "--out", help="write the projection as JSON here (default: <first RUN>/projection.json)"
    )
    pj.add_argument(
        "--write-site",
        dest="write_site",
        metavar="FILE",
        help="write the fitted link figures as a site-profile [network] snippet",
    )
    pj.add_argument(
        "--published",
        nargs="?",
        const="",
        default=None,
        metavar="FILE",
        help="project the published results (suite/projection/published.toml, or "
        "FILE in its format: docs/guide/projection.md) and print each against its published "
        "efficiency with its band",
    )
    pj.add_argument(
        "--all",
        action="store_true",
        help="also list the rows that cannot be projected (batch too small for the ranks, ...)",
    )
    # what --published does not read: a run's projection only (checked in main)
    for action in pj._actions:
        if action.dest not in ("help", "published", "out"):
            flag = action.option_strings[-1] if action.option_strings else action.metavar
            _RUN_ONLY[action.dest] = (str(flag), action.default)
    return pj


#: dest -> (flag, default) of every option that projects a run, which --published ignores
_RUN_ONLY: dict[str, tuple[str, Any]] = {}


def _check_published_alone(args: argparse.Namespace) -> None:
    """``--published`` projects each result from its own stated hardware; a run or a run's
    option beside it would be dropped unseen. A ConfigError naming them."""
    given = [
        flag
        for dest, (flag, default) in _RUN_ONLY.items()
        if getattr(args, dest) not in (default, None, [])
    ]
    if given:
        raise ConfigError(
            f"project --published: {', '.join(given)} not used: the published results are "
            "projected from the hardware and settings their file states (--out is the only "
            "other option); project a run in a separate command"
        )


def main(args: argparse.Namespace, argv: list[str]) -> int:

    console = cli_console(200)
    if args.published is not None:
        _check_published_alone(args)
        return _published(args, console)
    if not args.run_dirs:
        raise ConfigError("project: give a RUN directory (or --published)")
    from suite.params import parse_size
    from suite.projection import hardware
    from suite.projection.project import Settings, project
    from suite.report.load import load_runs

    hw = hardware.Hardware()
    if args.site:
        hw = hardware.from_site(args.site)
    flags = hardware.from_flags(
        args.gpus_per_node, args.intra_bw, args.inter_bw, args.latency, args.intra_latency,
        args.inter_latency, args.intra_kind, args.inter_kind,
    )  # fmt: skip
    if flags.given():
        hw = hardware.overlay(hw, flags)
    hardware.check_nodes(hw)
    hardware.check_kinds(hw)
    kind_notes = hardware.kinds_not_used(hw, flags)
    runs = load_runs([Path(p) for p in args.run_dirs], "project from")
    out = Path(args.out) if args.out else runs[0].path / "projection.json"
    writable(out, "--out")  # before the projection is computed, not after
    if args.write_site:
        writable(Path(args.write_site), "--write-site")
    settings = Settings(
        ranks=list(args.ranks),
        fit_ranks=args.fit_ranks,
        algorithm=args.algorithm,
        overlap=args.overlap,
        bucket=parse_size(args.bucket, "--bucket") if args.bucket else None,
        servers=args.servers,
        hardware=hw,
        compute_runs=load_runs([Path(p) for p in args.compute_from], "project from")
        if args.compute_from
        else [],
        check_runs=load_runs([Path(p) for p in args.check], "check against") if args.check else [],
        accept_busy=args.accept_busy,
        nccl_version=args.nccl_version,
        cycle_ms=args.cycle_ms,
        step_spread=args.step_spread,
    )
    doc = project(runs, settings)
    from suite.projection.render import (
        busy_rows_note,
        hidden_note,
        links_table,
        measured_table,
        oversubscribed_note,
        partial_node_note,
        projection_table,
    )

    if not doc.get("nothing_to_project"):
        console.print(projection_table(doc, show_all=args.all))
    if args.details:
        if doc["links"]:
            console.print(links_table(doc))
        checks = measured_table(doc)
        if checks is not None:
            console.print(checks)
    hidden = None if args.all else hidden_note(doc)
    over = oversubscribed_note(doc)
    extra = [n for n in (busy_rows_note(doc), over, partial_node_note(doc), hidden) if n]
    extra += kind_notes
    for line in doc["skipped_cases"] + doc["notes"] + extra:
        console.print(f"[yellow]note:[/] {escape(line)}", highlight=False)
    try:
        out.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write it ({exc.strerror})") from None
    console.print(f"wrote {out}", highlight=False)
    if args.write_site:
        _write_site(doc, Path(args.write_site))
        console.print(f"wrote {args.write_site}", highlight=False)
    if doc.get("nothing_to_project"):
        print(f"dlsuite: error: {doc['nothing_to_project']}", file=sys.stderr)
        return 2
    if not any("step_s" in r for r in doc["projections"]):
        reasons = sorted({r["cannot_fit"] for r in doc["projections"] if "cannot_fit" in r})
        print(
            "project: no row could be projected" + (f": {reasons[0]}" if reasons else ""),
            file=sys.stderr,
        )
        return 2
    return 0


def _write_site(doc: dict[str, Any], path: Path) -> None:
    from suite.projection.collectives import Link
    from suite.projection.hardware import site_snippet, write_snippet

    links: dict[str, Link | None] = {"intra_node": None, "inter_node": None}
    for row in doc["projections"]:
        for scope in links:
            d = (row.get("links") or {}).get(scope)
            if d and d.get("line_rate_bytes_per_s") is not None:
                continue  # a given link, not a fitted one
            if d and links[scope] is None:
                links[scope] = Link(
                    d["latency_s"], d["bandwidth_bytes_per_s"], d["source"], d["link"]
                )
    if links["intra_node"] is None and links["inter_node"] is None:
        raise ConfigError(
            "--write-site: no row used a link fitted from the run's collective sweeps (each "
            "used one given by the flags or the site profile, or the run has no sweep); nothing "
            "to write: project without the links' flags to write the fitted ones"
        )
    write_snippet(path, site_snippet(links["intra_node"], links["inter_node"], None, ""))


def _published(args: argparse.Namespace, console: Any) -> int:
    from suite.projection import published
    from suite.projection.render import published_partial_node_note, published_table

    path = Path(args.published) if args.published else published.PUBLISHED
    if args.out:
        writable(Path(args.out), "--out")
    items = published.check(path)
    console.print(published_table(items))
    part = published_partial_node_note(items)
    if part:
        console.print(f"[yellow]note:[/] {escape(part)}", highlight=False)
    console.print(
        f"{sum(p.within and p.inside for p in items)} of {len(items)} within "
        f"{published.TOLERANCE_POINTS:.0f} points and inside a band at most "
        f"{published.MAX_BAND_POINTS:.0f} points wide",
        highlight=False,
    )
    if args.out:
        try:
            Path(args.out).write_text(
                json.dumps(published.as_doc(items), indent=1, default=str) + "\n", encoding="utf-8"
            )
        except OSError as exc:
            raise ConfigError(f"--out {args.out}: cannot write it ({exc.strerror})") from None
        console.print(f"wrote {args.out}", highlight=False)
    return 0
