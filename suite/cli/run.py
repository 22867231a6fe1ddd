"""``dlsuite run``: plan and run benchmarks, writing RUN_DIR/results.jsonl."""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from suite.cli.common import ArgumentParser
from suite.cli.common import console as cli_console
from suite.cli.options import add_flags
from suite.settings import COMMAND_FLAGS, OPTIONS


def add_parser(sub: Any, parsers: dict[str, ArgumentParser]) -> ArgumentParser:
    r = sub.add_parser("run", help="plan and run benchmarks, writing RUN_DIR/results.jsonl")
    add_flags(r, OPTIONS)  # every setting, declared once in suite/settings.py
    add_flags(r, COMMAND_FLAGS, given_only=False)  # --config, --dry-run, --strict
    return r


def raise_resume_without_out(levels: list[str]) -> None:
    """``--resume`` continues the run in ``--out``; without one it made a new run directory
    and resumed nothing, unsaid (``make bench ARGS=--resume`` after a Ctrl-C). Exit 2, naming
    the newest run of these levels under runs/ where there is one."""
    from suite.errors import ConfigError

    suffix = "-" + "-".join(levels)
    runs = Path("runs")
    found = sorted(
        (d for d in runs.iterdir() if d.name.endswith(suffix) and (d / "manifest.json").is_file()),
        key=lambda d: d.name,
    ) if runs.is_dir() else []  # fmt: skip
    hint = (
        f" (the newest run of this level here: --out {shlex.quote(str(found[-1]))})"
        if found
        else ""
    )
    raise ConfigError(
        f"--resume: name the run directory to continue with --out DIR{hint}; without --out "
        "a new run directory would be made and nothing resumed"
    )


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from suite import config, plan, rundir, summary

    # the flags the user gave (None: not given), by setting; the layers below them in suite.config
    cli: dict[str, Any] = {o.name: getattr(args, o.name) for o in OPTIONS}
    cli["config"] = args.config
    from suite.schedulers import SCHEDULERS

    cfg = config.resolve(cli)
    if cfg.resume and not cfg.out:
        raise_resume_without_out(cfg.level)
    if not getattr(args, "no_history", False):
        from suite.history.store import resolve_store_path

        # a store path that can never be one (a directory): exit 2 now,
        # not a warning after the whole run
        resolve_store_path(getattr(args, "history", None))
    tasks = plan.build(cfg)
    scheduler = SCHEDULERS.load(cfg.scheduler)(cfg)
    console = cli_console()
    cfg.out = cfg.out or str(rundir.default_run_dir(cfg))
    from suite.backends.container import check_bindable

    check_bindable(Path(cfg.out), tasks)  # a path a container cannot bind: one line, now
    for note in cfg.plan_notes:
        console.print(f"dlsuite: {note}", style="yellow", markup=False, soft_wrap=True)
    if args.dry_run:
        described = list(scheduler.describe(tasks))  # a site's refusal before the plan's lines
        for t in tasks:
            console.print(
                f"{t.task_id}  {t.benchmark} {json.dumps(t.params)} {t.dtype} ({t.source})"
            )
        console.print(f"{len(tasks)} tasks")
        for line in described:
            print(line)  # scripts verbatim: no markup, no wrapping
        return 0
    try:
        outcome = scheduler.run(tasks, argv, console=Console(stderr=True))
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):  # stderr may have gone with the Ctrl-C (`| tee`)
            print(
                "dlsuite: interrupted; records so far are kept. Continue with: "
                f"dlsuite run --resume --out {shlex.quote(cfg.out)} (and the same other flags)",
                file=sys.stderr,
            )
        return 130
    console.print(summary.table(outcome.records, title=f"dlsuite run {outcome.run_dir}"))
    notes = (summary.over_peak_note(outcome.records), summary.above_ideal_note(outcome.records),
             summary.busy_note(outcome.records), summary.corrupt_note(outcome.records),
             summary.not_applied_note(outcome.records))  # fmt: skip
    for line in filter(None, notes):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    bad = [r for r in outcome.records if r["status"] in ("failed", "timeout", "oom")]
    wrong = [r for r in outcome.records if r["status"] == "ok" and not r["correctness"]["passed"]]
    # a timeout or an oom among them is said as such: the table above says timeout, not failed
    which = ", ".join(
        f"{n} {status}"
        for status in ("timeout", "oom")
        if (n := sum(r["status"] == status for r in bad))
    )
    console.print(
        f"{len(outcome.records)} records in {outcome.run_dir / 'results.jsonl'}: "
        f"{sum(r['status'] == 'ok' for r in outcome.records)} ok, "
        f"{sum(r['status'] == 'skipped' for r in outcome.records)} skipped, {len(bad)} failed"
        + (f" ({which})" if which else "")
        + f", {len(wrong)} with failed correctness checks"
    )
    for bug in sorted({b for r in wrong for b in summary.known_bugs(r)}):
        n = sum(bug in summary.known_bugs(r) for r in wrong)
        console.print(f"  {n} of them a known bug of the framework, not of the suite: {bug}")
    docs = {
        d["documented_difference"]: d.get("documented_in", "")
        for r in wrong
        for c in r["correctness"]["checks"]
        if not c["passed"] and (d := c.get("detail") or {}).get("documented_difference")
    }
    for what, where in sorted(docs.items()):
        n = sum(
            any(
                (c.get("detail") or {}).get("documented_difference") == what
                for c in r["correctness"]["checks"]
                if not c["passed"]
            )
            for r in wrong
        )
        console.print(
            f"  {n} of them a documented difference of the framework: {what} ({where})",
            markup=False,
            soft_wrap=True,
        )
    undetermined = [
        r for r in wrong
        if any(not c["passed"] and (c.get("detail") or {}).get(summary.NOT_DETERMINED)
               for c in r["correctness"]["checks"])
    ]  # fmt: skip
    if undetermined:
        console.print(
            f"  {len(undetermined)} of them not judged where an output's terms cancel beyond "
            "what its dtype determines (docs/reference/methodology.md, 'Cancelling sums')"
        )
    unexplained = [r for r in wrong if not summary.declared_known(r)]
    if wrong and not unexplained and not args.strict:
        console.print(
            "  every failed check is declared known (exit 0; --strict counts them as failures)"
        )
    from suite.cli.history import after_run

    after_run(args, outcome.run_dir, outcome.records)  # the history store; never fails the run
    return summary.run_exit_code(outcome.records, strict=args.strict)
