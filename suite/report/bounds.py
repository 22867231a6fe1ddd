"""What bounds a training configuration: compute, input or communication.

A configuration is a framework, a network (its architecture: resolution and width), a
device, a per-rank batch, a dtype, a world size and an input pipeline. Its step is split into
three terms, each in seconds with its interval, from three levels' records:

* **compute**: at one rank, the network level's training step (or, without one, the feed
  benchmark's step on batches in memory); at N ranks, the data-parallel step without the
  gradient exchange (DDP's ``no_sync``, measured in the same run: its ranks share the node's
  cores as the real step does). Its interval is the synchronised step's relative CI (the
  unsynchronised steps are timed as one block). The step decomposition says what the compute
  is made of where the operators were measured (:mod:`suite.report.decompose`).
* **input**: the feed benchmark's wait per step for the loader's next batch (training fed by
  the framework's own pipeline, on the same cores), at one rank; the configuration names the
  pipeline (format, workers, decode), since frameworks read different formats.
* **communication**: the exposed exchange, the data-parallel step minus the same step without
  the exchange; 0 at one rank. Where the projection (``dlsuite project``'s model) was fitted
  to the same records, its dominant term at its largest rank count is shown beside it.

The verdict is the largest term when its interval lies above every other's; when intervals
overlap, "no clear bound"; when a term was not measured at this configuration, no verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.onnx import USER_MODEL
from suite.report.decompose import machine_key, record_id, threads, usable
from suite.report.document import Section, Table
from suite.report.intervals import Iv, fmt_share, fmt_time
from suite.report.load import Run, metric

TITLE = "What bounds training"
TERMS = ("compute", "input", "communication")
#: a projection's terms (its row's keys) and how the section names them
PROJECTED_TERMS = {"compute_s": "compute", "exposed_s": "exposed exchange",
                   "overhead_s": "strategy overhead"}  # fmt: skip
#: what a projection hook gives: data-parallel record id -> its projected row at the largest
#: rank count (compute_s, exposed_s, overhead_s, ranks, step_s)
Projected = Callable[[list[Run]], dict[str, dict[str, Any]]]


def fit_projection(
    projected: Projected | None, runs: list[Run]
) -> tuple[dict[str, dict[str, Any]], Exception | None]:
    """The projection's rows for ``runs`` (none without a projection) and the error that kept
    it from being fitted: a section goes on without it."""
    if projected is None:
        return {}, None
    try:
        return projected(runs), None
    except Exception as exc:  # noqa: BLE001 - the section goes on without the projection
        return {}, exc


def arch_key(network: str, params: dict[str, Any]) -> tuple[Any, ...]:
    if network == USER_MODEL and params.get("model"):  # a user's file (--model): by its path
        network = " ".join(
            [str(params["model"]), *([params["dims"]] if params.get("dims") else [])]
        )
    return (network, params.get("resolution"), params.get("width", 1))


def config_key(rec: dict[str, Any], arch: tuple[Any, ...], per_rank_batch: int) -> tuple[Any, ...]:
    return (rec["framework"]["name"], *machine_key(rec), rec["dtype"], *arch, per_rank_batch)


@dataclass
class TermValue:
    seconds: Iv
    source: str  # what measured it, in words
    records: list[str]
    #: the CPU threads its record computed with (decompose.threads: "" off the CPU)
    threads: str = ""


@dataclass
class Bound:
    """One configuration's three terms and the verdict."""

    key: tuple[Any, ...]
    world: int
    pipeline: str
    terms: dict[str, TermValue | None]
    projected: dict[str, Any] | None = None
    #: one rank: the feed record's own step fed by the loader and from memory (the same
    #: record), for :meth:`slowdown_note`
    fed: tuple[Iv, Iv] | None = None

    def slowdown_note(self) -> str:
        """Where the fed step exceeds the step from memory by more than the wait (its whole
        interval above zero): the loader's workers slowed the step itself on the same cores,
        a cost the input term (the wait) does not hold; "" otherwise."""
        wait = self.terms.get("input")
        if self.fed is None or wait is None:
            return ""
        fed, memory = self.fed
        beyond = fed - memory - wait.seconds
        if beyond.lo <= 0:
            return ""
        return (f"Fed by its loader the step took {fmt_time(fed)} against {fmt_time(memory)} "
                f"from memory in the same record: beyond the wait, the loader's workers slowed "
                f"the step by {fmt_time(beyond)} ({fmt_share(beyond.over(fed))} of the fed step) "
                "on the same cores, which no term holds (or the load changed between the two "
                "phases)")  # fmt: skip

    def threads_note(self) -> str:
        """Where the measured terms' records computed on different CPU thread counts (a
        network step on 2 threads beside a feed run with --threads 1), which; "" otherwise.
        A count a framework did not record ("default") is not known to differ."""
        used = {n: t.threads for n, t in self.terms.items() if t is not None and t.records}
        counts = set(used.values())
        if len(counts) < 2 or not all(c.isdigit() for c in counts):
            return ""
        return "measured on different CPU threads: " + ", ".join(
            f"{n} {c}" for n, c in used.items()
        )

    @property
    def framework(self) -> str:
        return str(self.key[0])

    @property
    def records(self) -> list[str]:
        out: list[str] = []
        for t in self.terms.values():
            if t is not None:
                out += [r for r in t.records if r not in out]
        return out

    def label(self) -> str:
        fw, _host, _kind, device, dtype, net, res, width, batch = self.key
        name = Path(net).name if "/" in net else net  # a user's file by its name
        arch = f"{name}" + (f" {res}px" if res else "") + (f" w/{width}" if width != 1 else "")
        return (f"{fw} · {arch} · batch {batch}/rank · {dtype} · {self.world} rank(s) · "
                f"{device} · {self.pipeline}")  # fmt: skip

    def total(self) -> Iv | None:
        if any(t is None for t in self.terms.values()):
            return None
        parts = [t.seconds for t in self.terms.values() if t is not None]
        out = parts[0]
        for p in parts[1:]:
            out = out + p
        return out

    def share(self, name: str) -> Iv | None:
        """``name``'s share of the three terms' sum, with its interval (its own extreme over
        the others' opposite extremes)."""
        t = self.terms.get(name)
        if t is None or self.total() is None:
            return None
        others = [o.seconds for n, o in self.terms.items() if n != name and o is not None]
        lo_rest = sum(max(o.lo, 0.0) for o in others)
        hi_rest = sum(max(o.hi, 0.0) for o in others)
        v = t.seconds

        def frac(x: float, rest: float) -> float:
            return x / (x + rest) if x + rest > 0 else 0.0

        mid = frac(max(v.value, 0.0), sum(max(o.value, 0.0) for o in others))
        return Iv(mid, frac(max(v.lo, 0.0), hi_rest), frac(max(v.hi, 0.0), lo_rest))

    def verdict(self) -> tuple[str, str | None]:
        """(the sentence, the bounding term or None)."""
        missing = [n for n, t in self.terms.items() if t is None]
        if missing:
            return (f"not decided: {', '.join(missing)} not measured at this configuration", None)
        values = {n: t.seconds for n, t in self.terms.items() if t is not None}
        top = max(values, key=lambda n: values[n].value)
        rivals = [n for n in values if n != top and values[n].hi >= values[top].lo]
        if rivals:
            return (f"no clear bound: the intervals of {top} and {', '.join(rivals)} overlap", None)
        return (f"{top}-bound", top)


def unmeasurable(name: str, iv: Iv) -> bool:
    """An exposed exchange measured at or below zero: the step without the exchange no faster
    than with it (hidden, or noise)."""
    return name == "communication" and iv.value <= 0


def fmt_term(name: str, iv: Iv) -> str:
    """A term's seconds with its interval; an :func:`unmeasurable` exchange says so in words,
    so no negative time stands alone."""
    if not unmeasurable(name, iv):
        return fmt_time(iv)
    return f"none measurable ({fmt_time(iv)}: the step without the exchange was no faster)"


def _pipeline(rec: dict[str, Any]) -> str:
    p = rec["benchmark"]["params"]
    decode = p.get("decode", "host")
    return f"{p.get('format')} · {p.get('workers')} worker(s) · decode on {decode}"


def bounds(runs: list[Run], projected: dict[str, dict[str, Any]] | None = None) -> list[Bound]:
    """Every configuration with a data-parallel or feed record, its terms and verdict."""
    train: dict[tuple[Any, ...], tuple[Run, dict[str, Any]]] = {}
    feeds: dict[tuple[Any, ...], list[tuple[Run, dict[str, Any]]]] = {}
    dps: list[tuple[Run, dict[str, Any], tuple[Any, ...]]] = []
    for run in runs:
        for rec in run.records:
            if not usable(rec):
                continue
            b = rec["benchmark"]
            p = b["params"]
            if b["level"] == "network" and b["name"] == "train" and rec.get("world_size", 1) == 1:
                train.setdefault(config_key(rec, arch_key(p["network"], p), p["batch"]), (run, rec))
            elif b["level"] == "training" and b["name"] == "feed":
                key = config_key(rec, arch_key(p["network"], {**p, "resolution": 224}), p["batch"])
                feeds.setdefault(key, []).append((run, rec))
            elif b["level"] == "distributed" and b["name"] == "data_parallel":
                per_rank = int((rec.get("work") or {}).get("per_rank_batch", p["batch"]))
                dps.append((run, rec, config_key(rec, arch_key(p["network"], p), per_rank)))
    out: list[Bound] = []
    multi = [(run, rec, key) for run, rec, key in dps if rec.get("world_size", 1) > 1]
    for run, rec, key in multi:
        step = Iv.of_metric(metric(rec, "step_time") or {})
        nosync = (rec.get("work") or {}).get("no_sync_step_s")
        if nosync is None:
            continue
        rel = (step.lo / step.value, step.hi / step.value) if step.value else (1.0, 1.0)
        compute = Iv(nosync, nosync * rel[0], nosync * rel[1])
        # kept as measured: a step without the exchange no faster than with it (noise, or an
        # exchange hidden entirely) gives an exposed exchange at or below zero, interval and all
        comm = step - compute
        rid = record_id(run, rec)
        base = {
            "compute": TermValue(compute, "data-parallel step without the exchange", [rid],
                                 threads(rec)),
            "communication": TermValue(comm, "data-parallel step minus the same without the "
                                             "exchange", [rid], threads(rec)),
        }  # fmt: skip
        for pipeline, feed in _feed_terms(feeds.get(key, [])) or [("no feed record", None)]:
            b = Bound(key, int(rec["world_size"]), pipeline, {**base, "input": feed})
            b.terms = {n: b.terms[n] for n in TERMS}
            if projected and rid in projected:
                b.projected = projected[rid]
            out.append(b)
    for key, items in feeds.items():  # one rank: the feed beside the network's own step
        for pipeline, feed in _feed_terms(items):
            assert feed is not None
            frun, frec = next((r, x) for r, x in items if _pipeline(x) == pipeline)
            work: TermValue
            if key in train:
                trun, trec = train[key]
                work = TermValue(Iv.of_metric(metric(trec, "step_time") or {}),
                                    "network-level training step",
                                    [record_id(trun, trec)], threads(trec))  # fmt: skip
            else:
                work = TermValue(Iv.of_metric(metric(frec, "step_time_from_memory") or {}),
                                    "feed benchmark's step from memory",
                                    [record_id(frun, frec)], threads(frec))  # fmt: skip
            none = TermValue(Iv.exact(0.0), "one rank: no exchange", [])
            fed, memory = metric(frec, "step_time"), metric(frec, "step_time_from_memory")
            out.append(Bound(key, 1, pipeline,
                             {"compute": work, "input": feed, "communication": none},
                             fed=(Iv.of_metric(fed), Iv.of_metric(memory))
                             if fed and memory else None))  # fmt: skip
    return out


def _feed_terms(items: list[tuple[Run, dict[str, Any]]]) -> list[tuple[str, TermValue | None]]:
    out: list[tuple[str, TermValue | None]] = []
    seen: set[str] = set()
    for run, rec in items:
        pipeline = _pipeline(rec)
        wait = metric(rec, "input_wait")
        if pipeline in seen or wait is None:
            continue
        seen.add(pipeline)
        share = metric(rec, "input_bound_share")
        tail = f"; input-bound share {share['value']:.0f}%" if share else ""
        out.append((pipeline, TermValue(Iv.of_metric(wait),
                                        f"feed: wait for the loader per step{tail}",
                                        [record_id(run, rec)], threads(rec))))  # fmt: skip
    return out


def bounds_section(
    runs: list[Run], figure_name: Callable[[str], str], projected: Projected | None = None
) -> Section:
    s = Section(TITLE)
    rows_proj, error = fit_projection(projected, runs)
    if error is not None:
        s.add(f"(The projection could not be fitted to these runs: {error}.)")
    found = bounds(runs, rows_proj)
    if not found:
        s.add(
            "No training configuration to judge: run the feed benchmark (`--level training "
            "--benchmark feed`) and data-parallel training (`--level distributed --benchmark "
            "data_parallel`) at the same network, width and per-rank batch."
        )
        return s
    s.add(
        "Per configuration, the step's three terms in seconds with their intervals and their "
        "shares of the sum: compute (one rank: the network level's training step; N ranks: the "
        "data-parallel step without the gradient exchange), input (the feed benchmark's wait "
        "for the loader per step, on the same cores; the pipeline is named, frameworks read "
        "different formats) and communication (the exposed exchange: the data-parallel step "
        "minus the same without it). A verdict names the largest term when its interval lies "
        "above the others'; overlapping intervals give no clear bound."
    )
    rows = []
    for b in found:
        verdict, _ = b.verdict()
        cells = [b.label()]
        for name in TERMS:
            t = b.terms[name]
            share = b.share(name)
            if t is None:
                cells.append("not measured")
            elif not t.records:  # one rank: nothing exchanged, nothing measured
                cells.append(f"none ({t.source})")
            else:
                said = fmt_term(name, t.seconds)
                if share is not None and not unmeasurable(name, t.seconds):
                    said += f" ({fmt_share(share)})"
                cells.append(said)
        proj = ""
        if b.projected:
            terms = {PROJECTED_TERMS[k]: b.projected.get(k) or 0.0 for k in PROJECTED_TERMS}
            top = max(terms, key=lambda k: terms[k])
            proj = f"{top} at {b.projected.get('ranks')} ranks ({100 * terms[top] / max(sum(terms.values()), 1e-30):.0f}%)"
            if b.projected.get("busy"):
                proj += ", fitted to busy records"
        compute = b.terms["compute"]
        note = b.threads_note()
        cells += [compute.source if compute else "-", proj or "-",
                  verdict + (f" ({note})" if note else "")]  # fmt: skip
        rows.append(cells)
    s.add(Table(["configuration", *TERMS, "compute measured by", "projection's dominant term",
                 "verdict"], rows))  # fmt: skip
    s.add(Table(["configuration", "records"], [[b.label(), ", ".join(b.records)] for b in found],
                caption="the records behind each configuration's terms"))  # fmt: skip
    return s
