"""``dlsuite envs list|create|prune``: the per-framework environments of the venv backend."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.table import Table

from suite.cli.common import ArgumentParser, console, csv
from suite.cli.options import add_flag
from suite.errors import ConfigError
from suite.settings import setting


def add_parser(sub: Any, parsers: dict[str, ArgumentParser]) -> ArgumentParser:
    ev = sub.add_parser("envs", help="the per-framework environments of the venv backend")
    add_flag(ev, setting("envs_dir"))
    evs = ev.add_subparsers(dest="envs_command", required=True)
    evl = evs.add_parser("list", help="every environment, whether it is current, its size")
    evl.add_argument("--json", action="store_true", help="machine-readable output")
    evc = evs.add_parser("create", help="build a framework's environment now (reused if there)")
    evc.add_argument("frameworks", type=csv, metavar="FRAMEWORK[,FRAMEWORK]")
    evc.add_argument(
        "--with", dest="extra", type=csv, default=[], help="extra packages, e.g. pytest"
    )
    evp = evs.add_parser("prune", help="remove stale (requirements changed) or half-built ones")
    evp.add_argument("--all", dest="everything", action="store_true", help="remove all")
    evp.add_argument("--dry-run", action="store_true", help="say what would go")
    for parser in (evl, evc, evp):  # after the subcommand too (`dlsuite envs list --envs-dir D`)
        add_flag(parser, setting("envs_dir"), default=argparse.SUPPRESS)
    return ev


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from suite import envs

    root = envs.envs_root(args.envs_dir)
    if args.envs_command == "create":
        if not args.frameworks:
            raise ConfigError(
                "envs create: no framework named; give one or more, e.g. `dlsuite envs create "
                "pytorch,numpy`"
            )
        for fw in args.frameworks:  # every name checked before the first build (minutes)
            envs.requirements_file(fw)
        failed = 0
        for fw in args.frameworks:
            try:
                env = envs.ensure(fw, root, extra=tuple(args.extra))
                print(env.path)
            except envs.EnvBuildError as exc:
                print(f"dlsuite: error: {exc}", file=sys.stderr)
                failed += 1
            except KeyboardInterrupt:  # ensure said what was left behind
                return 130
        return 1 if failed else 0
    if args.envs_command == "prune":
        busy: list[str] = []
        gone = envs.prune(root, everything=args.everything, dry_run=args.dry_run, busy=busy)
        verb = "would remove" if args.dry_run else "removed"
        print(f"{verb} {len(gone)} environment(s) in {root}" + "".join(f"\n  {g}" for g in gone))
        if busy:
            print(f"left alone, being built by another process now: {', '.join(busy)}")
        return 0
    rows = envs.list_envs(root)
    if args.json:
        print(json.dumps({"root": str(root), "environments": rows}, indent=2))
        return 0
    table = Table(title=f"environments in {root}")
    for col in ("name", "framework", "state", "python", "size", "created"):
        table.add_column(col)
    for e in rows:
        state = "current" if e["current"] else "stale (requirements changed)"
        if not e["built"]:
            state = "being built" if e["building"] else "half-built"
        table.add_row(
            e["name"],
            e["framework"],
            state,
            e["python"] or "",
            f"{e['size_mb']:.0f} MB",
            (e["created_at"] or "")[:19],
        )
    console().print(table)
    if not root.is_dir():  # a misspelt --envs-dir / DLSUITE_ENVS_DIR looks like an empty one
        print(f"dlsuite: {root} does not exist (yet): environments are made there on first use",
              file=sys.stderr)  # fmt: skip
    return 0
