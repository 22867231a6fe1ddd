"""``dlsuite history ...``: the history of every run (suite/history/), and the hook that
appends a run when ``dlsuite run`` ends.

dlsuite history list    [--host H] [--json]                runs per machine and software version
dlsuite history trend   [FILTERS] [--last K] [--json]      each figure's trend, one line each
dlsuite history show    [FILTERS] [--last K] [--json]      one table per figure, run by run
dlsuite history check   [--run RUN_ID|RUN_DIR] [--last N] [--tolerance 5%] [--any-host] [--all]
                                                           exit 1 on a change beyond the noise
dlsuite history plot    --out FILE.png [FILTERS] [--last K]
dlsuite history import  RUN_DIR...                         fill the store from run directories
dlsuite history rebuild RUN_DIR...                         a new store from the run directories

FILTERS: --level, --benchmark, --framework, --dtype, --host, --metric (comma-separated) and
--param KEY=VALUE (repeatable). Every subcommand takes --history PATH (else DLSUITE_HISTORY,
else ~/.local/share/dlsuite/history.sqlite).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from suite.cli.common import ArgumentParser, csv, positive_int
from suite.cli.common import console as cli_console
from suite.errors import ConfigError

if TYPE_CHECKING:  # suite.history is imported where it is used: `dlsuite --help` stays quick
    from suite.history import analysis, ingest
    from suite.history import store as history_store
    from suite.report import SectionMaker

SPARK = "▁▂▃▄▅▆▇█"


def _store_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--history",
        metavar="PATH",
        help="the history store (default: $DLSUITE_HISTORY, else "
        "$XDG_DATA_HOME/dlsuite/history.sqlite, ~/.local/share/dlsuite/history.sqlite where "
        "XDG_DATA_HOME is unset)",
    )


def _filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--level", dest="levels", type=csv, help="operator, network, distributed")
    p.add_argument("--benchmark", dest="benchmarks", type=csv, help="benchmark name(s)")
    p.add_argument("--framework", dest="frameworks", type=csv, help="framework(s)")
    p.add_argument("--dtype", dest="dtypes", type=csv, help="dtype(s)")
    p.add_argument("--host", dest="hosts", type=csv, help="host name(s) (the records' host)")
    p.add_argument("--metric", dest="metrics", type=csv, help="metric(s), e.g. time,flop_rate")
    p.add_argument(
        "--param",
        dest="params",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only parameter sets with this value (repeatable), e.g. --param m=1024",
    )
    p.add_argument(
        "--last", type=positive_int, default=20, metavar="K", help="the last K runs (default 20)"
    )


def add_parser(sub: Any, parsers: dict[str, ArgumentParser]) -> ArgumentParser:
    """Register ``dlsuite history``, ``dlsuite run``'s ``--history``/``--no-history`` and
    ``dlsuite report``'s ``--history``/``--trends``."""
    run_parser, report_parser = parsers["run"], parsers["report"]
    _store_flag(run_parser)
    run_parser.add_argument(
        "--no-history",
        dest="no_history",
        action="store_true",
        help="do not append this run to the history store at its end",
    )
    _store_flag(report_parser)
    report_parser.add_argument(
        "--trends",
        action="store_true",
        help="add a History section: each figure's trend over the runs in the history store "
        "(implied by --history)",
    )

    hp = sub.add_parser(
        "history", help="the history of every run: list, trends, regressions over the last N runs"
    )
    hs = hp.add_subparsers(dest="history_command", required=True)

    ls = hs.add_parser("list", help="runs per machine and software version")
    _store_flag(ls)
    ls.add_argument("--host", dest="hosts", type=csv, help="only these hosts")
    ls.add_argument("--json", action="store_true", help="machine-readable output")

    for name, what in (
        ("trend", "each figure's trend over the runs: one line per figure"),
        ("show", "one table per figure: its value in every run, with versions"),
    ):
        tp = hs.add_parser(name, help=what)
        _store_flag(tp)
        _filters(tp)
        tp.add_argument(
            "--tolerance", default="5%", help="for the change to the previous run (default 5%%)"
        )
        tp.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "show":
            tp.add_argument(
                "--max-figures", type=positive_int, default=10, help="tables shown (default 10)"
            )

    ck = hs.add_parser(
        "check",
        help="flag changes beyond the noise against the last N runs of each task on the same "
        "host (dlsuite compare's rule); exit 1 on any",
    )
    _store_flag(ck)
    ck.add_argument(
        "--run",
        help="the run checked: a run id in the store or a run directory (default: the newest "
        "run in the store)",
    )
    ck.add_argument(
        "--host", help="with no --run: the newest run on this host (default: the newest of all)"
    )
    ck.add_argument(
        "--last", type=positive_int, default=5, metavar="N", help="baseline runs (default 5)"
    )
    ck.add_argument("--tolerance", default="5%", help="relative tolerance (default 5%%)")
    ck.add_argument(
        "--any-host",
        action="store_true",
        help="baselines from any host with the same device (nodes of one cluster partition)",
    )
    ck.add_argument(
        "--include-busy",
        action="store_true",
        help="judge figures measured on a busy machine (the quiet check's verdict); by default "
        "they are busy, not regressed",
    )
    ck.add_argument(
        "--all",
        action="store_true",
        help="list every figure, not only those that regressed or improved",
    )
    ck.add_argument("--json", action="store_true", help="machine-readable output")

    pl = hs.add_parser("plot", help="a PNG of figures' trends (one metric)")
    _store_flag(pl)
    _filters(pl)
    pl.add_argument("--out", required=True, help="the PNG file to write")

    for name, what in (
        ("import", "add run directories to the store (a run already there is not duplicated)"),
        ("rebuild", "make the store again from run directories (the old file is moved aside)"),
    ):
        ip = hs.add_parser(name, help=what)
        _store_flag(ip)
        ip.add_argument(
            "run_dirs",
            nargs="+",
            metavar="RUN_DIR",
            help="run directories, results.jsonl files or folders holding run directories",
        )
    return hp


# -- the hooks ---------------------------------------------------------------------------------


def after_run(args: argparse.Namespace, run_dir: Path, records: Sequence[dict[str, Any]]) -> None:
    """``dlsuite run``'s hook, called once when a run ended (not when it was interrupted: a
    resumed run is appended when it ends, and ``dlsuite history import`` adds any run).

    Never raises: the run's records are already on disk, and a store that cannot be written
    costs one warning line, not the run's exit code."""
    from suite.history import ingest
    from suite.history import store as history_store

    if getattr(args, "no_history", False):
        return
    try:
        path = history_store.resolve_store_path(getattr(args, "history", None))
        added = ingest.record_finished_run(path, run_dir, records)
    except Exception as exc:  # noqa: BLE001 - whatever fails here, the records stay as they are
        print(
            f"dlsuite: warning: run not added to the history ({exc}); its records in {run_dir} "
            f"are unchanged; add it later with: dlsuite history import {shlex.quote(str(run_dir))}",
            file=sys.stderr,
        )
        return
    for a in added:
        print(f"history: run {a.run_id} ({a.records} records) {a.action} in {path}")


def report_sections(args: argparse.Namespace) -> list[SectionMaker]:
    """``dlsuite report``'s extra sections: the History section when ``--trends`` or
    ``--history PATH`` asks for it."""
    if not (getattr(args, "trends", False) or getattr(args, "history", None)):
        return []
    from suite.history import store as history_store
    from suite.history.report import section_maker

    return [section_maker(history_store.resolve_store_path(getattr(args, "history", None)))]


# -- the subcommands ---------------------------------------------------------------------------


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from suite.history import ingest
    from suite.history import store as history_store

    command = args.history_command
    path = history_store.resolve_store_path(args.history)
    console = cli_console(200, soft_wrap=True)
    if command == "rebuild":
        report, moved, replaced = ingest.rebuild(path, [Path(p) for p in args.run_dirs])
        _print_import(report, console)
        if not replaced:
            kept = "left as it was" if path.exists() else "not made"
            print(
                f"dlsuite: error: no run imported, so the store {path} was {kept}; give run "
                "directories holding records (a run directory, its results.jsonl, or a folder "
                "of them such as runs/)",
                file=sys.stderr,
            )
            return 2
        if moved is not None:
            console.print(f"the previous store was moved to {escape(str(moved))}")
        console.print(f"rebuilt {escape(str(path))}")
        return 2 if report.problems else 0
    found: list[Path] = []
    if command == "import":  # walked once, before the store is made: a wrong path makes none
        found = ingest.run_dirs_to_import([Path(p) for p in args.run_dirs])
    with history_store.HistoryStore(path, create=command == "import") as store:
        if command == "import":
            report = ingest.import_runs(store, found)  # run directories: not walked again
            _print_import(report, console)
            return 2 if report.problems else 0
        if command == "list":
            return _list(store, args, console)
        if command in ("trend", "show"):
            return _trend(store, args, console)
        if command == "check":
            return _check(store, args, console)
        return _plot(store, args, console)


def _print_import(report: ingest.ImportReport, console: Console) -> None:
    for a in report.added:
        console.print(f"{a.action}: run {a.run_id} ({a.records} records) from {escape(a.run_dir)}")
    for note in report.notes:
        console.print(f"[yellow]note[/]: {escape(note)}")
    for problem in report.problems:
        print(f"dlsuite: error: not imported: {problem}", file=sys.stderr)
    counts = {
        k: sum(a.action == k for a in report.added) for k in ("added", "replaced", "unchanged")
    }
    console.print(
        f"{counts['added']} run(s) added, {counts['replaced']} replaced, "
        f"{counts['unchanged']} already there; {len(report.problems)} not imported"
    )


def _when(iso: str | None) -> str:
    return (iso or "?")[:16].replace("T", " ")


def _list(store: history_store.HistoryStore, args: argparse.Namespace, console: Console) -> int:
    runs = store.runs(args.hosts)
    if args.json:
        print(json.dumps({"store": str(store.path), "runs": [r.to_dict() for r in runs]}, indent=2))
        return 0
    if not runs:
        hosts = sorted({r.host for r in store.runs()}) if args.hosts else []
        on = f" on host {', '.join(args.hosts)}" if args.hosts else ""
        held = f" (it holds runs of: {', '.join(hosts)})" if hosts else ""
        console.print(f"no runs{escape(on)} in {escape(str(store.path))}{escape(held)}")
        return 0
    groups: dict[tuple[str, str], list[history_store.RunInfo]] = {}
    for r in runs:
        groups.setdefault((r.host, r.software), []).append(r)
    t = Table(title=f"runs per machine and software version in {store.path}", header_style="bold")
    for col in ("host", "CPU / devices", "software", "runs", "first", "last"):
        t.add_column(col, overflow="fold")
    for (host, software), rs in groups.items():
        devices = sorted({d for r in rs for d in r.devices})
        t.add_row(
            Text(host), Text(", ".join(devices)), Text(software), str(len(rs)),
            _when(rs[0].started_at), _when(rs[-1].started_at),
        )  # fmt: skip
    console.print(t)
    for host in dict.fromkeys(r.host for r in runs):
        rt = Table(title=f"runs on {host}", header_style="bold")
        for col in ("started", "run id", "state", "software", "ok", "skipped", "failed", "wrong", "run directory"):  # fmt: skip
            rt.add_column(col, overflow="fold")
        for r in (r for r in runs if r.host == host):
            c = r.counts
            rt.add_row(
                _when(r.started_at), Text(r.run_id), Text(r.state), Text(r.software),
                str(c["ok"]), str(c["skipped"]),
                Text(str(c["failed"]), style="red" if c["failed"] else ""),
                Text(str(c["wrong"]), style="red" if c["wrong"] else ""), Text(r.run_dir),
            )  # fmt: skip
        console.print(rt)
    return 0


def _param_filter(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--param {item!r}: write KEY=VALUE, e.g. --param m=1024")
        out[key.strip()] = value.strip()
    return out


def _selected_trends(
    store: history_store.HistoryStore, args: argparse.Namespace
) -> list[analysis.Trend]:
    from suite.history import analysis
    from suite.levels import LEVELS

    unknown = [lv for lv in args.levels or [] if lv not in LEVELS]
    if unknown:
        raise ConfigError(
            f"--level {','.join(unknown)}: no such level; use some of: {', '.join(LEVELS)}"
        )
    stored = store.records(
        levels=args.levels,
        benchmarks=args.benchmarks,
        frameworks=args.frameworks,
        dtypes=args.dtypes,
        hosts=args.hosts,
        metrics=args.metrics,
    )
    return analysis.trends(
        stored, metrics=args.metrics, params=_param_filter(args.params), last=args.last
    )


def _unmatched(store: history_store.HistoryStore, args: argparse.Namespace) -> str:
    """Which filter matched nothing the store holds, with what it holds there: `` --framework
    pytroch: the store has jax, pytorch``; empty when each value alone is there."""
    every = store.records()
    fields = (
        ("--benchmark", args.benchmarks, lambda r: r["benchmark"]["name"]),
        ("--framework", args.frameworks, lambda r: r["framework"]["name"]),
        ("--dtype", args.dtypes, lambda r: r["dtype"]),
        ("--host", args.hosts, lambda r: r["host"]),
        ("--metric", args.metrics, None),
    )
    out = []
    for flag, wanted, get in fields:
        if not wanted:
            continue
        held = sorted(
            {m["name"] for s in every for m in s.rec.get("metrics") or []}
            if get is None
            else {get(s.rec) for s in every}
        )
        missing = [w for w in wanted if w not in held]
        if missing:
            out.append(f"{flag} {','.join(missing)}: the store has {', '.join(held) or 'none'}")
    return "; ".join(out)


def _fmt(m: dict[str, Any]) -> str:
    from suite.report.sections import fmt_value

    return fmt_value(m)


def spark(values: Sequence[float]) -> str:
    """A sparkline of ``values`` (oldest left)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return ""
    lo, hi = min(finite), max(finite)
    span = hi - lo
    return "".join(
        SPARK[0 if span == 0 or not math.isfinite(v) else round((v - lo) / span * (len(SPARK) - 1))]
        for v in values
    )


def _change(tr: analysis.Trend, tolerance: float) -> tuple[str, float]:
    """(verdict, relative change) of the newest point against the one before it."""
    from suite.compare import step_verdict

    if len(tr.points) < 2:
        return "", math.nan
    prev, last = tr.points[-2], tr.points[-1]
    return step_verdict(
        prev.record, prev.metric, last.record, last.metric, tolerance, tr.higher_is_better
    )


def _label(rec: dict[str, Any]) -> str:
    from suite.summary import params_label

    return params_label(rec)


def _device(rec: dict[str, Any]) -> str:
    return str((rec.get("device") or {}).get("name") or "?")


def trend_dict(tr: analysis.Trend, tolerance: float) -> dict[str, Any]:
    """A trend as JSON (``--json``; also what the tests compare across stores)."""
    verdict, change = _change(tr, tolerance)
    rec = tr.record
    return {
        "host": tr.host,
        "level": rec["benchmark"]["level"],
        "benchmark": rec["benchmark"]["name"],
        "params": rec["benchmark"]["params"],
        "framework": rec["framework"]["name"],
        "dtype": rec["dtype"],
        "device": rec.get("device"),
        "world_size": rec["world_size"],
        "rank": rec["rank"],
        "metric": tr.metric,
        "unit": tr.unit,
        "higher_is_better": tr.higher_is_better,
        "last_change": None if math.isnan(change) else change,
        "last_verdict": verdict or None,
        "points": [
            {
                "run_id": p.run.run_id,
                "started_at": p.run.started_at,
                "suite_version": p.run.suite_version,
                "git_commit": p.run.git_commit,
                "framework_version": p.record["framework"].get("version"),
                "driver": (p.record.get("device") or {}).get("driver"),
                "value": p.value,
                "ci95": p.metric.get("ci95"),
                "n": p.metric.get("n"),
                "correctness_passed": (p.record.get("correctness") or {}).get("passed"),
                "setup": p.setup,
            }
            for p in tr.points
        ],
        "not_ok": [
            {
                "run_id": s.run.run_id,
                "started_at": s.run.started_at,
                "status": s.rec["status"],
                "reason": s.rec.get("reason"),
            }
            for s in tr.not_ok
        ],
    }


def _setup_changes(prev: analysis.TrendPoint | None, p: analysis.TrendPoint) -> list[str]:
    """What ``p`` was measured with unlike the point before, besides the framework, driver and
    suite that ``show`` has columns for (backend, cores, threads, CUDA...)."""
    from suite.history.analysis import differences

    if prev is None:
        return []
    shown = (p.record["framework"]["name"], "driver", "dlsuite")
    return [c for c in differences(prev.stored, p.stored) if c.split(": ")[0] not in shown]


def _newer_not_ok(tr: analysis.Trend) -> str:
    """`` (then timeout in run X)``: what the task did in the runs after its newest value."""
    later = tr.newer_not_ok
    if not later:
        return ""
    last = later[-1]
    more = f", and {len(later) - 1} more not ok" if len(later) > 1 else ""
    return f" (then {last.rec['status']} in run {last.run.run_id}{more})"


def _trend(store: history_store.HistoryStore, args: argparse.Namespace, console: Console) -> int:
    from suite.compare import VERDICT_STYLE, parse_tolerance

    tolerance = parse_tolerance(args.tolerance)
    trs = _selected_trends(store, args)
    if args.json:
        print(json.dumps([trend_dict(t, tolerance) for t in trs], indent=2))
        return 0
    if not trs:
        why = _unmatched(store, args)
        console.print(
            f"no figure in {escape(str(store.path))} matches these filters"
            + (f" ({escape(why)})" if why else " (`dlsuite history list` shows what it holds)")
        )
        return 0
    hosts = {t.host for t in trs}
    if args.history_command == "trend":
        t = Table(
            title=f"dlsuite history trend: {len(trs)} figures, last {args.last} runs "
            f"(change: newest against the run before, tolerance {tolerance:.1%})",
            header_style="bold",
        )
        cols = [*(["host"] if len(hosts) > 1 else []), "benchmark", "params", "dtype",
                "framework", "device", "metric", "runs", "first", "newest", "change", "trend"]  # fmt: skip
        for col in cols:
            t.add_column(
                col, overflow="fold", justify="right" if col in ("runs", "change") else "left"
            )
        for tr in trs:
            rec = tr.record
            verdict, change = _change(tr, tolerance)
            change_cell = Text("-")
            if verdict:
                pct = f"{change:+.1%}" if math.isfinite(change) else "n/a"
                change_cell = Text(f"{pct} {verdict}", style=VERDICT_STYLE[verdict])
            t.add_row(
                *([Text(tr.host)] if len(hosts) > 1 else []),
                Text(rec["benchmark"]["name"]), Text(_label(rec)), Text(rec["dtype"]),
                Text(rec["framework"]["name"]), Text(_device(rec)),
                f"{tr.metric} {'↑' if tr.higher_is_better else '↓'}", str(len(tr.points)),
                _fmt(tr.points[0].metric), _fmt(tr.points[-1].metric) + _newer_not_ok(tr),
                change_cell,
                spark([p.value for p in tr.points]),
            )  # fmt: skip
        console.print(t)
        return 0
    for tr in trs[: args.max_figures]:
        rec = tr.record
        t = Table(
            title=f"{rec['benchmark']['name']} {_label(rec)} {rec['dtype']} "
            f"{rec['framework']['name']} on {_device(rec)} ({tr.host}): {tr.metric} "
            f"{'↑' if tr.higher_is_better else '↓'}",
            header_style="bold",
        )
        for col in ("run", "started", "run id", "suite", "framework", "driver", tr.metric, "n", "change", "correct", "setup changed"):  # fmt: skip
            t.add_column(col, overflow="fold")
        from suite.history.store import StoredRecord

        prev: analysis.TrendPoint | None = None
        rows: list[analysis.TrendPoint | history_store.StoredRecord] = [*tr.points, *tr.not_ok]
        rows.sort(key=lambda r: (r.run.started_at, r.run.run_id))
        for i, p in enumerate(rows, 1):
            if isinstance(p, StoredRecord):  # a run in which the task did not run
                reason = (p.rec.get("reason") or "").strip().splitlines()[:1]
                t.add_row(
                    str(i), _when(p.run.started_at), Text(p.run.run_id),
                    Text(f"{p.run.suite_version or '?'} @{(p.run.git_commit or '?')[:10]}"),
                    Text(str(p.rec["framework"].get("version") or "?")),
                    Text(str((p.rec.get("device") or {}).get("driver") or "-")),
                    Text(p.rec["status"], style="red bold" if p.rec["status"] != "skipped" else ""),
                    "-", Text(reason[0][:80] if reason else ""), "-", "",
                )  # fmt: skip
                continue
            change_cell = Text("")
            if prev is not None:
                from suite.compare import step_verdict

                v, ch = step_verdict(
                    prev.record, prev.metric, p.record, p.metric, tolerance, tr.higher_is_better
                )
                pct = f"{ch:+.1%}" if math.isfinite(ch) else "n/a"
                change_cell = Text(f"{pct} {v}", style=VERDICT_STYLE[v])
            corr = (p.record.get("correctness") or {}).get("passed")
            setup = _setup_changes(prev, p)
            t.add_row(
                str(i), _when(p.run.started_at), Text(p.run.run_id),
                Text(f"{p.run.suite_version or '?'} @{(p.run.git_commit or '?')[:10]}"),
                Text(str(p.record["framework"].get("version") or "?")),
                Text(str((p.record.get("device") or {}).get("driver") or "-")),
                _fmt(p.metric), str(p.metric.get("n", "-")), change_cell,
                Text("pass" if corr else "FAIL" if corr is False else "-",
                     style="" if corr is not False else "red bold"),
                Text("; ".join(setup), style="yellow" if setup else ""),
            )  # fmt: skip
            prev = p
        console.print(t)
    if len(trs) > args.max_figures:
        console.print(
            f"[yellow]{len(trs) - args.max_figures} more figure(s) match[/]: narrow with "
            "--benchmark, --param, --metric, --dtype, --framework (or raise --max-figures)"
        )
    return 0


def _check_target(
    store: history_store.HistoryStore, run: str | None, host: str | None
) -> tuple[history_store.RunInfo, list[history_store.StoredRecord]]:
    from suite.history import analysis

    if run is None:
        runs = store.runs([host] if host else None)
        if not runs:
            on = f" on host {host}" if host else ""
            raise ConfigError(
                f"{store.path} holds no runs{on} to check; `dlsuite history list` shows them, "
                "`dlsuite history import RUN_DIR...` adds some"
            )
        info = runs[-1]
        return info, store.records(run_id=info.run_id)
    info_or_none = store.run(run)
    if info_or_none is not None:
        return info_or_none, store.records(run_id=run)
    if Path(run).exists():
        return analysis.entry_for_check(Path(run))
    raise ConfigError(
        f"--run {run}: neither a run id in {store.path} nor a run directory "
        "(`dlsuite history list` shows the run ids)"
    )


def check_dict(chk: analysis.HistoryCheck) -> dict[str, Any]:
    from suite.compare import VERDICTS

    def ident(rec: dict[str, Any]) -> dict[str, Any]:
        return {
            "benchmark": rec["benchmark"]["name"], "params": rec["benchmark"]["params"],
            "framework": rec["framework"]["name"], "dtype": rec["dtype"],
            "device": _device(rec), "world_size": rec["world_size"], "rank": rec["rank"],
            "host": rec["host"],
        }  # fmt: skip

    return {
        "run_id": chk.target.run_id,
        "last": chk.last,
        "tolerance": chk.tolerance,
        "any_host": chk.any_host,
        "failed": chk.failed,
        "counts": {v: chk.count(v) for v in VERDICTS},
        "figures": [
            {
                **ident(f.target.rec),
                "metric": f.metric,
                "unit": f.unit,
                "value": float(f.new.get("median", f.new["value"])),
                "verdict": f.verdict,
                "changes": f.changes,
                "against": [
                    {
                        "run_id": r.run_id,
                        "value": float(d.base.get("median", d.base["value"])),
                        "change": d.change if math.isfinite(d.change) else None,
                        "verdict": d.verdict,
                    }
                    for r, d in f.against
                ],  # fmt: skip
            }
            for f in chk.figures
        ],
        "newly_failing_checks": [
            {**ident(c.new_rec), "check": c.name, "baseline_run": r.run_id}
            for r, c in chk.newly_failing_checks
        ],
        "status_regressions": [
            {**ident(n), "status": n["status"], "baseline_run": r.run_id}
            for r, _, n in chk.status_regressions
        ],
        "no_history": [ident(s.rec) for s in chk.no_history],
    }


def _print_changes(chk: analysis.HistoryCheck, console: Console) -> None:
    """Under the check's table: what the regressed and improved figures were measured with
    unlike their newest baseline (framework, suite, driver, backend, threads...), one line per
    set of changes with the tasks it concerns: such a change can move a figure on a machine
    that did not change."""
    groups: dict[tuple[str, ...], dict[str, list[str]]] = {}
    for f in chk.figures:
        if f.changes and f.verdict in ("regressed", "improved"):
            rec = f.target.rec
            task = f"{rec['benchmark']['name']} {_label(rec)} {rec['dtype']}"
            groups.setdefault(tuple(f.changes), {}).setdefault(task, []).append(f.verdict)
    for changes, tasks in groups.items():
        figures = sum(map(len, tasks.values()))
        names = ", ".join(list(tasks)[:4]) + (
            f" and {len(tasks) - 4} more" if len(tasks) > 4 else ""
        )
        console.print(
            f"[yellow]measured with, unlike the newest baseline[/]: {escape('; '.join(changes))} "
            f"({figures} regressed or improved figure(s): {escape(names)}); the change may come "
            "from this, not from the machine"
        )


def _check(store: history_store.HistoryStore, args: argparse.Namespace, console: Console) -> int:
    from suite.compare import VERDICT_STYLE, not_judged, parse_tolerance
    from suite.history import analysis

    tolerance = parse_tolerance(args.tolerance)
    info, targets = _check_target(store, args.run, args.host)
    chk = analysis.check_run(
        store, info, targets, last=args.last, tolerance=tolerance, any_host=args.any_host,
        include_busy=args.include_busy,
    )  # fmt: skip
    if args.json:
        print(json.dumps(check_dict(chk), indent=2))
        return 1 if chk.failed else 0
    where = "any host with the same device" if args.any_host else "the same host"
    t = Table(
        title=f"dlsuite history check: run {info.run_id} ({_when(info.started_at)}, {info.host}) "
        f"against the last {args.last} runs of each task on {where} (tolerance {tolerance:.1%})",
        header_style="bold",
    )
    for col in ("benchmark", "params", "dtype", "framework", "device", "metric", "NEW", "newest baseline", "change", "against", "verdict"):  # fmt: skip
        t.add_column(col, overflow="fold")
    # what moved, both ways: an improvement after a driver or framework update is a finding too
    # (it was counted in the last line and shown nowhere without --all)
    shown = [f for f in chk.figures if args.all or f.verdict in ("regressed", "improved")]
    for f in shown:
        rec = f.target.rec
        judged = [d for _, d in f.against if d.verdict != "busy"]  # busy ones judge nothing
        newest = judged[0] if judged else f.against[0][1]  # the newest baseline that judges
        busy = f" ({len(f.against) - len(judged)} busy)" if len(judged) < len(f.against) else ""
        same = sum(d.verdict == f.verdict for d in judged)
        t.add_row(
            Text(rec["benchmark"]["name"]), Text(_label(rec)), Text(rec["dtype"]),
            Text(rec["framework"]["name"]), Text(_device(rec)),
            f"{f.metric} {'↑' if f.higher_is_better else '↓'}", _fmt(f.new), _fmt(newest.base),
            f"{newest.change:+.1%}" if math.isfinite(newest.change) else "n/a",
            (f"{len(f.against)} busy run(s): none judged" if not judged else
             (f"{f.verdict if f.verdict != 'unchanged' else 'changed'} vs {same if f.verdict != 'unchanged' else len(judged) - same} of {len(judged)} runs"
              if f.verdict not in ("unchanged", "busy") or same != len(judged) else f"{len(judged)} runs") + busy),
            Text(f.verdict, style=VERDICT_STYLE[f.verdict]),
        )  # fmt: skip
    if shown:
        console.print(t)
    _print_changes(chk, console)
    for r, c in chk.newly_failing_checks:
        console.print(
            f"[red bold]correctness check newly failing[/]: {escape(c.new_rec['benchmark']['name'])} "
            f"{escape(_label(c.new_rec))} {escape(c.new_rec['dtype'])} "
            f"{escape(c.new_rec['framework']['name'])}: {escape(c.name)} passed in run {r.run_id}"
        )
    for r, _, n in chk.status_regressions:
        console.print(
            f"[red bold]status regression[/]: {escape(n['benchmark']['name'])} "
            f"{escape(_label(n))} {escape(n['dtype'])} {escape(n['framework']['name'])}: ok in "
            f"run {r.run_id}, {n['status']} now"
        )
    for note in chk.unit_mismatches:
        console.print(f"[yellow]not compared (units differ)[/]: {escape(note)}")
    for note in chk.peak_changes:
        console.print(f"[yellow]not compared (a share of another peak)[/]: {escape(note)}")
    if info.state in ("running", "interrupted", "stopped"):  # its missing tasks: not checked
        console.print(
            f"[yellow]run {escape(info.run_id)} did not finish[/] (state {escape(str(info.state))}): "
            "the tasks it has no record of were not checked (`dlsuite report "
            f"{escape(info.run_dir)}` lists them)"
        )
    verdict = chk.verdict_markup()  # exit 0 when nothing was judged: a first run has no baseline
    console.print(
        f"{len(targets)} records, {len(chk.figures)} figures with history: "
        f"[red]{chk.count('regressed')} regressed[/], [green]{chk.count('improved')} improved[/], "
        f"{chk.count('unchanged')} unchanged{not_judged(chk.count('busy'))}"
        f"; {len(chk.newly_failing_checks)} correctness "
        f"check(s) newly failing, {len(chk.status_regressions)} record(s) newly failed; "
        f"{len(chk.no_history)} record(s) without an earlier run on {where}. {verdict}"
    )
    return 1 if chk.failed else 0


def _plot(store: history_store.HistoryStore, args: argparse.Namespace, console: Console) -> int:
    from suite.history.report import AXIS_COLUMNS, axis_rows, plotted, trend_png

    out = Path(args.out)
    if out.suffix.lower() != ".png":  # a PNG named x.txt or x.svg: a file nothing opens right
        raise ConfigError(
            f"--out {args.out}: the plot is written as a PNG; name the file with .png "
            f"(e.g. --out {out.with_suffix('.png').name})"
        )
    trs = _selected_trends(store, args)
    if not trs:
        why = _unmatched(store, args)
        raise ConfigError(
            "no figure matches these filters"
            + (f" ({why})" if why else "; `dlsuite history trend` lists them")
        )
    metrics = sorted({(t.metric, t.unit) for t in trs})
    if len(metrics) > 1:
        raise ConfigError(
            f"the filters match {len(metrics)} metrics ({', '.join(m for m, _ in metrics)}); "
            "plot one: add --metric NAME"
        )
    png, left_out = trend_png(trs, title=f"{trs[0].metric} over runs")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(png)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write it ({exc.strerror})") from None
    console.print(f"wrote {escape(str(out))} ({len(trs) - left_out} figure(s))")
    # the plot's x axis is a run number: which run each is
    t = Table(title="the runs on the x axis", header_style="bold")
    for col in AXIS_COLUMNS:
        t.add_column(col, overflow="fold")
    for row in axis_rows(plotted(trs)):
        t.add_row(*map(Text, row))
    console.print(t)
    if left_out:
        console.print(f"[yellow]{left_out} more figure(s) match; narrow the filters to see them[/]")
    return 0
