"""The report's training-level section: the input pipelines (samples/s and MB/s against
loader workers, cold and warm, CPU cores, bytes from storage, the checks), their feeding
capacity (against the accelerators in references/ and against this run's own training rate
from memory), and the end-to-end records (the input-bound share of the step against workers).
Reads records only."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from suite.report.document import Figure, Heading, Section, Table
from suite.report.load import Run
from suite.summary import steady_label

TITLE = "Training level: the input pipeline"
BUSY_SHARE = 0.9  # MLPerf Storage's rule (suite/levels/training/pipeline.py)


def _metric(rec: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((m for m in rec.get("metrics") or [] if m["name"] == name), None)


def _records(runs: list[Run], name: str) -> list[dict[str, Any]]:
    return [r for run in runs for r in run.records
            if r["benchmark"]["level"] == "training" and r["benchmark"]["name"] == name
            and r["status"] == "ok"]  # fmt: skip


def training_section(runs: list[Run], figure_name: Callable[[str], str]) -> Section:
    s = Section(TITLE)
    loaders, feeds = _records(runs, "loader"), _records(runs, "feed")
    if not loaders and not feeds:
        s.add("No training-level records in these runs.")
        return s
    if loaders:
        _loaders(s, loaders, feeds, figure_name)
    if feeds:
        _feeds(s, feeds, figure_name)
    return s


def _key(r: dict[str, Any]) -> str:
    p = r["benchmark"]["params"]
    data = p.get("data") or p.get("dataset")
    return f"{r['framework']['name']} {p['format']} b{p['batch']} {p['transform']} {p['cache']} ({data})"


def _loaders(s: Section, recs: list[dict[str, Any]], feeds: list[dict[str, Any]],
             figure_name: Callable[[str], str]) -> None:  # fmt: skip
    s.add(Heading("Loaders"))
    s.add("Each framework's own loader reading the dataset from storage (docs/reference/training-level.md): "
          "samples/s and MB/s are the median of the measured epoch's windows with their 95% CI; "
          "cores: CPU time of the task's processes over the epoch; from storage: the bytes its "
          "processes took from the device (a cold read ~ the dataset, a warm one ~ 0); "
          "where it differs, the dataset's part of it in brackets (the rest: modules the "
          "loader's fresh workers re-read, by the page cache's residency).")  # fmt: skip
    rows = []
    for r in sorted(
        recs, key=lambda r: (_key(r), r["benchmark"]["params"]["workers"], r["world_size"])
    ):
        p, pl = r["benchmark"]["params"], r["pipeline"]
        tp, mb = _metric(r, "throughput"), _metric(r, "read_rate")
        first = _metric(r, "time_to_first_batch")
        cores = _metric(r, "pipeline_cpu_cores")
        lo, hi = (tp or {}).get("ci95", [math.nan, math.nan])
        agg = (pl.get("ranks") or {}).get("aggregate_rate")
        rows.append([
            r["framework"]["name"], p["format"], str(p["workers"]), str(p["batch"]), p["cache"],
            str(r["world_size"]),
            f"{tp['value']:.1f} ({lo:.1f}–{hi:.1f})" if tp else "-",
            f"{pl['epoch']['steady_rate']:.1f}" + ("*" if steady_label(r) else ""),
            f"{agg:.1f}" if agg else "",
            f"{mb['value']:.1f}" if mb else "-",
            f"{first['value']:.2f} s" if first else "-",
            f"{cores['value']:.2f}" if cores else "-",
            _from_storage(pl["cache"]),
            "pass" if r["correctness"]["passed"] else "FAIL",
        ])  # fmt: skip
    s.add(Table(["framework", "format", "workers", "batch", "cache", "ranks", "samples/s (CI)",
                 "epoch", "all ranks", "MB/s", "first batch", "cores", "from storage", "checks"],
                rows))  # fmt: skip
    if any(steady_label(r) for r in recs):
        s.add("epoch: the measured epoch's steady rate (its samples over its time after the "
              "warm-up), which the feeding capacity uses; * below the interval of the windows' "
              "median: slow batches (a large image, a stall) the median passes over")  # fmt: skip
    series: dict[str, list[tuple[float, tuple[float, float, float]]]] = {}
    for r in recs:
        tp = _metric(r, "throughput")
        if tp is None or r["world_size"] != 1:
            continue
        lo, hi = tp["ci95"]
        series.setdefault(_key(r), []).append(
            (float(r["benchmark"]["params"]["workers"] or 0.5), (tp["value"], lo, hi))
        )
    if any(len(v) > 1 for v in series.values()):
        from suite.report.plots import xy_lines

        png = xy_lines(series, title="Input pipeline throughput against loader workers",
                       xlabel="loader workers", ylabel="samples/s")  # fmt: skip
        s.add(Figure(figure_name("training_loader_workers"), png,
                     "samples/s against loader workers, one line per framework, format and cache state"))  # fmt: skip
    # feeding capacity: references/ accelerators and this run's training rates from memory
    consumers: dict[str, dict[str, Any]] = {}
    for r in recs:
        for f in r["pipeline"].get("feeding") or []:
            consumers.setdefault(f"{f['accelerator']} {f.get('network')} {f.get('dtype')} "
                                 f"b{f.get('batch')}", f)  # fmt: skip
    for f in feeds:
        e = f["end_to_end"]
        name = (
            f"this machine: {f['framework']['name']} {e['network']} fp32 b{e['batch']} from memory"
        )
        consumers.setdefault(
            name, {"rate": e["train_rate_memory"], "source": "this run's feed record"}
        )
    if consumers:
        s.add(Heading("Feeding capacity"))
        s.add(f"How many accelerators consuming at each rate a pipeline keeps at least "
              f"{BUSY_SHARE:.0%} busy (MLPerf Storage's rule: floor(pipeline rate / "
              f"({BUSY_SHARE} x accelerator rate))), for each loader record's steady rate.")  # fmt: skip
        names = list(consumers)
        rows = []
        for r in recs:
            rate = r["pipeline"]["epoch"]["steady_rate"]
            p = r["benchmark"]["params"]
            cells = []
            for n in names:
                c = consumers[n]["rate"]
                k = int(math.floor(rate / (BUSY_SHARE * c) + 1e-9))
                cells.append(f"{k}" + (f" ({rate / c:.0%} of one)" if k == 0 else ""))
            rows.append([f"{r['framework']['name']} {p['format']} w{p['workers']} {p['cache']}",
                         f"{rate:.1f}", *cells])  # fmt: skip
        s.add(Table(["pipeline", "samples/s", *[f"{n} ({consumers[n]['rate']:.0f}/s)" for n in names]],
                    rows, caption="; ".join(f"{n}: {consumers[n]['source']}" for n in names)))  # fmt: skip


def _feeds(s: Section, recs: list[dict[str, Any]], figure_name: Callable[[str], str]) -> None:
    s.add(Heading("End to end: training fed by the loader"))
    s.add("The same network trained on batches already in memory and then fed by the loader "
          "(its workers share the cores with the training): the input wait is the time a step "
          "waits for its batch and brings it to the network; the input-bound share is that wait "
          "over the step; fed / memory is the fed step over the step from memory (the loader's "
          "workers also take cores from the training).")  # fmt: skip
    rows = []
    series: dict[str, list[tuple[float, tuple[float, float, float]]]] = {}
    for r in sorted(recs, key=lambda r: (r["framework"]["name"], r["benchmark"]["params"]["format"],
                                         r["benchmark"]["params"]["workers"])):  # fmt: skip
        p, e = r["benchmark"]["params"], r["end_to_end"]
        rows.append([r["framework"]["name"], f"{e['network']} {e['resolution']}px", p["format"],
                     str(p["workers"]), str(e["batch"]), f"{e['step_s_memory']:.3f} s",
                     f"{e['step_s_fed']:.3f} s", f"{e['input_wait_s'] * 1e3:.1f} ms",
                     f"{100 * e['input_bound_share']:.1f}%",
                     f"{e['step_s_fed'] / e['step_s_memory']:.2f}x" if e["step_s_memory"] else "-"])  # fmt: skip
        share = 100 * e["input_bound_share"]
        series.setdefault(f"{r['framework']['name']} {p['format']} {e['network']}", []).append(
            (float(p["workers"] or 0.5), (share, share, share))
        )
    s.add(Table(["framework", "network", "format", "workers", "batch", "step from memory",
                 "step fed", "input wait", "input-bound", "fed / memory"], rows))  # fmt: skip
    if any(len(v) > 1 for v in series.values()):
        from suite.report.plots import xy_lines

        png = xy_lines(series, title="Input-bound share of the training step against loader workers",
                       xlabel="loader workers", ylabel="% of the step waiting for input")  # fmt: skip
        s.add(Figure(figure_name("training_stall_share"), png,
                     "input-bound share of the step against loader workers"))  # fmt: skip


def _from_storage(cache: dict[str, Any]) -> str:
    """The tree's MB from storage, and the dataset's part of them where that differs."""
    tree = cache["read_bytes_from_storage"] / 1e6
    dataset = cache.get("dataset_read_bytes")
    if dataset is None or round(dataset / 1e6) == round(tree):
        return f"{tree:.0f} MB"
    return f"{tree:.0f} MB ({dataset / 1e6:.0f} MB of the dataset)"
