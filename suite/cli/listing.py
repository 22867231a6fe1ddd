"""``dlsuite list``: levels, benchmarks, frameworks (with availability) and metrics."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console, RenderableType
from rich.padding import Padding
from rich.table import Table

from suite.cli.common import ArgumentParser
from suite.errors import SuiteError


def add_parser(sub: Any, parsers: dict[str, ArgumentParser]) -> ArgumentParser:
    ls = sub.add_parser(
        "list", help="levels, benchmarks, frameworks (with availability) and metrics"
    )
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    return ls


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from suite import metrics
    from suite.adapters import ADAPTERS
    from suite.levels import LEVELS, benchmark_names, load_benchmark

    levels: dict[str, Any] = {}
    for level in LEVELS:
        levels[level] = {
            name: load_benchmark(level, name).summary for name in benchmark_names(level)
        }
    frameworks = {name: framework_status(name) for name in ADAPTERS.names()}
    mets = {
        m.name: {
            "unit": m.unit,
            "higher_is_better": m.higher_is_better,
            "description": m.description,
        }
        for m in metrics.REGISTRY.values()
    }
    doc = {
        "levels": levels,
        "frameworks": frameworks,
        "metrics": mets,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    c = Console()
    # grids, not padded strings: a long name (data_parallel, horovod-tensorflow) keeps its
    # column and a wrapped description stays under its own
    for level, benches in levels.items():
        c.print(f"[bold]level {level}[/]")
        c.print(_grid([(name, text) for name, text in benches.items()]))
    c.print("[bold]frameworks[/] (backend auto: local when available here, else its venv)")
    rows = []
    for name, info in frameworks.items():
        if info["available"]:
            state = f"[green]available here[/] {info.get('version_unknown') or info['version']}"
        else:
            state = f"[yellow]not here[/] ({info['reason']})"
        venv = info["environment"]
        if venv["recipe"] is None:
            where = "no environment recipe"
        else:
            where = f"venv {venv['name']} " + ("[green]built[/]" if venv["built"] else "not built")
        only = info.get("levels")
        if only is not None and len(only) < len(levels):  # Horovod: the distributed level
            where += f"; runs the {', '.join(only)} level{'s' if len(only) > 1 else ''} only"
        rows.append((name, f"{state}; {where}"))
    c.print(_grid(rows))
    c.print("[bold]metrics[/]")
    c.print(_grid([
        (name, m["unit"], f"{'higher' if m['higher_is_better'] else 'lower'} is better")
        for name, m in mets.items()
    ]))  # fmt: skip
    return 0


def _grid(rows: Sequence[Sequence[Any]]) -> RenderableType:
    """Rows under aligned columns, indented two spaces; the last column wraps."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    for _ in rows[0][1:] if rows else ():
        grid.add_column()
    for row in rows:
        grid.add_row(*(str(cell) for cell in row))
    return Padding(grid, (0, 0, 0, 2), expand=False)


def framework_status(name: str) -> dict[str, Any]:
    """Availability here, the installed version, and the framework's venv (built or not)."""
    from suite import envs
    from suite.adapters import ADAPTERS
    from suite.levels import LEVELS

    out: dict[str, Any] = {}
    try:
        cls = ADAPTERS.load(name)
        out["levels"] = [level for level in LEVELS if level in cls.levels]
        ok, why = cls.available()
        version = cls.installed_version()
        out.update(available=ok, reason=why or None, version=version)
        if ok and version is None:  # importable, but its version is not found: say why
            out["version_unknown"] = cls.version_unknown()
    except SuiteError as exc:
        out.update(available=False, reason=str(exc), version=None)
    try:
        env = envs.env_for(name)
        recipe: str | None = str(envs.requirements_file(name))
        out["environment"] = {
            "recipe": recipe,
            "name": env.name,
            "path": str(env.path),
            "built": env.built,
        }
    except SuiteError:
        out["environment"] = {"recipe": None, "name": None, "path": None, "built": False}
    return out
