"""``dlsuite list``: levels, benchmarks, frameworks (with availability) and metrics."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console

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
    for level, benches in levels.items():
        c.print(f"[bold]level {level}[/]")
        for name, text in benches.items():
            c.print(f"  {name:<10} {text}")
    c.print("[bold]frameworks[/] (backend auto: local when available here, else its venv)")
    for name, info in frameworks.items():
        if info["available"]:
            state = f"[green]available here[/] {info['version']}"
        else:
            state = f"[yellow]not here[/] ({info['reason']})"
        venv = info["environment"]
        if venv["recipe"] is None:
            where = "no environment recipe"
        else:
            where = f"venv {venv['name']} " + ("[green]built[/]" if venv["built"] else "not built")
        c.print(f"  {name:<10} {state}; {where}")
    c.print("[bold]metrics[/]")
    for name, m in mets.items():
        c.print(
            f"  {name:<16} {m['unit']:<10} {'higher' if m['higher_is_better'] else 'lower'} is better"
        )
    return 0


def framework_status(name: str) -> dict[str, Any]:
    """Availability here, the installed version, and the framework's venv (built or not)."""
    from suite import envs
    from suite.adapters import ADAPTERS

    out: dict[str, Any] = {}
    try:
        cls = ADAPTERS.load(name)
        ok, why = cls.available()
        out.update(available=ok, reason=why or None, version=cls.installed_version())
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
