"""Reference values with tolerances per device or site, in ReFrame's style (regression gate).

A references file (``references/*.toml``) holds ``[[reference]]`` tables. Each names *which*
records it applies to (match keys) and *what* it expects::

    [[reference]]
    level = "operator"            # match keys: level and benchmark are required,
    benchmark = "gemm"            # the others are optional (absent = any)
    params = { m = 256, n = 256, k = 256 }   # a subset of the record's params
    dtype = "fp32"
    framework = "pytorch"
    device = "EPYC"               # substring of device.name, case-insensitive
    device_kind = "cpu"
    device_attrs = { cores = 2 }  # a subset of the record's device object
    world_size = 1
    metric = "flop_rate"          # what is expected
    value = 0.187
    lower = -0.5                  # relative bounds, as in ReFrame: value * (1 + lower) ...
    upper = 1.0                   # ... to value * (1 + upper); absent (or +-inf) = unbounded
    unit = "TFLOP/s"              # optional; when given it must equal the record's unit

A record is checked against every reference that matches it; each match gives one verdict,
``within``, ``below`` or ``above``. Which verdict is a failure depends on the metric's
direction: ``below`` for a higher-is-better metric, ``above`` for a lower-is-better one.
A record that failed, timed out or ran out of memory where a reference expects a value is a
failing verdict of its status: its task wrote one record with the task's parameters (a
collective's sweep: ``sizes``, not each size's ``message_bytes``), which matches the references
of every point the task covers, on any device where it failed before it knew its device.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from rich.console import Console

from suite.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

VERDICTS = ("within", "below", "above")

_REFERENCE: dict[str, Any] = {
    "type": "object",
    "required": ["level", "benchmark", "metric", "value"],
    "additionalProperties": False,
    "properties": {
        "level": {"enum": ["operator", "network", "distributed", "training"]},
        "benchmark": {"type": "string", "minLength": 1},
        "params": {"type": "object"},
        "dtype": {"enum": ["fp64", "fp32", "tf32", "bf16", "fp16"]},
        "framework": {"type": "string", "minLength": 1},
        "device": {"type": "string", "minLength": 1, "description": "substring of device.name"},
        "device_kind": {"enum": ["cpu", "gpu"]},
        "device_attrs": {"type": "object", "description": "subset of the record's device"},
        "world_size": {"type": "integer", "minimum": 1},
        "metric": {"type": "string", "minLength": 1},
        "value": {"type": "number"},
        "lower": {"type": "number", "maximum": 0, "description": "relative; -0.1 = 10% below"},
        "upper": {"type": "number", "minimum": 0, "description": "relative; 0.1 = 10% above"},
        "unit": {"type": "string", "minLength": 1},
        "note": {"type": "string"},
    },
}

REFERENCES_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "dlsuite references file",
    "type": "object",
    "required": ["reference"],
    "additionalProperties": False,
    "properties": {
        "description": {"type": "string"},
        "site": {"type": "string"},
        "reference": {"type": "array", "minItems": 1, "items": _REFERENCE},
    },
}

_VALIDATOR = Draft202012Validator(REFERENCES_SCHEMA)


@dataclass(frozen=True)
class Reference:
    """One expected value and the records it applies to."""

    level: str
    benchmark: str
    metric: str
    value: float
    lower: float | None = None  # relative, <= 0; None = unbounded
    upper: float | None = None  # relative, >= 0; None = unbounded
    unit: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    dtype: str | None = None
    framework: str | None = None
    device: str | None = None
    device_kind: str | None = None
    device_attrs: dict[str, Any] = field(default_factory=dict)
    world_size: int | None = None
    note: str = ""
    source: str = ""  # "file.toml: reference[3]"

    def matches(self, record: dict[str, Any]) -> bool:
        """Whether this reference applies to ``record`` (its metric may still be absent). A
        record that did not finish (failed, timed out, oom) matches where its task covers
        the reference's parameters (:meth:`suite.benchmark.Benchmark.covers`) and, its device
        unknown, whatever device the reference names."""
        b = record["benchmark"]
        if (b["level"], b["name"]) != (self.level, self.benchmark):
            return False
        unfinished = record.get("status") in BAD_STATUSES
        if any(k not in b["params"] or b["params"][k] != v for k, v in self.params.items()):
            from suite.levels import task_covers

            if not (unfinished and task_covers(b, self.params)):
                return False
        if self.dtype is not None and record["dtype"] != self.dtype:
            return False
        if self.framework is not None and record["framework"]["name"] != self.framework:
            return False
        if self.world_size is not None and record["world_size"] != self.world_size:
            return False
        dev = record.get("device")
        if self.device is not None or self.device_kind is not None or self.device_attrs:
            if not dev:
                return unfinished
            if self.device is not None and self.device.lower() not in str(dev["name"]).lower():
                return False
            if self.device_kind is not None and dev["kind"] != self.device_kind:
                return False
            if any(dev.get(k) != v for k, v in self.device_attrs.items()):
                return False
        return True

    def bounds(self) -> tuple[float, float]:
        """Absolute (low, high) bounds; ±inf where unbounded. Relative to ``|value|``."""
        low = -math.inf if self.lower is None else self.value + self.lower * abs(self.value)
        high = math.inf if self.upper is None else self.value + self.upper * abs(self.value)
        return low, high

    def verdict(self, measured: float) -> str:
        low, high = self.bounds()
        if measured < low:
            return "below"
        if measured > high:
            return "above"
        return "within"


#: statuses of a record whose task did not finish (a reference's value was not measured)
BAD_STATUSES = ("failed", "timeout", "oom")


def _unbounded(x: float | None) -> float | None:
    return None if x is None or math.isinf(x) else float(x)


#: benchmark names of records the host writes, beside the levels' registries
HOST_RECORDS = {"network": ("agreement_matrix",)}


def _check_names(t: dict[str, Any], where: str) -> None:
    """A benchmark, metric or framework this suite does not have is a typo that would match
    no record, leaving the reference "unused" and the gate passing: one ConfigError."""
    from suite.adapters import ADAPTERS
    from suite.levels import benchmark_names
    from suite.metrics import REGISTRY

    known = {
        "benchmark": [*benchmark_names(t["level"]), *HOST_RECORDS.get(t["level"], ())],
        "metric": list(REGISTRY),
        "framework": ADAPTERS.names(),
    }
    for key, names in known.items():
        if key in t and t[key] not in names:
            of = f" of level {t['level']}" if key == "benchmark" else ""
            raise ConfigError(
                f"{where}.{key}: {t[key]!r} is not a {key}{of} of this suite; choose from: "
                f"{', '.join(sorted(names))}"
            )


def parse_references(doc: Any, source: str) -> list[Reference]:
    """References of one parsed file; ConfigError names the file, the field and the fix."""
    err = best_match(_VALIDATOR.iter_errors(doc))
    if err is not None:
        from suite.schemas import field_path, unknown_key_message

        raise ConfigError(
            f"{source}: {field_path(err)}: {unknown_key_message(err) or err.message}; "
            "see the header of references/cpu-2core-ci.toml for the format"
        )
    refs = []
    for i, t in enumerate(doc["reference"]):
        if any(
            isinstance(t.get(k), float) and math.isnan(t[k]) for k in ("value", "lower", "upper")
        ):
            raise ConfigError(f"{source}: reference[{i}]: nan is not a value or a bound")
        _check_names(t, f"{source}: reference[{i}]")
        refs.append(
            Reference(
                level=t["level"],
                benchmark=t["benchmark"],
                metric=t["metric"],
                value=float(t["value"]),
                lower=_unbounded(t.get("lower")),
                upper=_unbounded(t.get("upper")),
                unit=t.get("unit"),
                params=dict(t.get("params", {})),
                dtype=t.get("dtype"),
                framework=t.get("framework"),
                device=t.get("device"),
                device_kind=t.get("device_kind"),
                device_attrs=dict(t.get("device_attrs", {})),
                world_size=t.get("world_size"),
                note=t.get("note", ""),
                source=f"{source}: reference[{i}]",
            )
        )
    return refs


def reference_files(paths: Iterable[Path]) -> list[Path]:
    """The files named, with a directory standing for its ``*.toml`` files (sorted)."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(p.glob("*.toml"))
            if not found:
                raise ConfigError(f"{p}: a directory without *.toml references files")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise ConfigError(f"{p}: no such references file or directory")
    return out


def load_references(paths: Iterable[Path]) -> list[Reference]:
    """Load and validate references files (or directories of them)."""
    refs: list[Reference] = []
    files = reference_files(paths)
    if not files:
        raise ConfigError("no references file given; pass one or more references/*.toml")
    for path in files:
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: TOML syntax error: {exc}") from None
        refs += parse_references(doc, str(path))
    return refs


def check(record: dict[str, Any], refs: Sequence[Reference]) -> list[dict[str, Any]]:
    """Verdicts of every reference that matches ``record`` and whose metric it carries.

    ``ok`` records are checked; one that failed, timed out or ran out of memory gives a failing
    verdict of its status (``value`` None) for each reference that matches it; a skipped one
    gives ``[]``. Each item: ``metric``, ``value``
    (the record's headline value), ``reference``, ``lower``, ``upper`` (relative, None =
    unbounded), ``unit``, ``verdict`` (``within``/``below``/``above``), ``higher_is_better``,
    ``passed`` (False for ``below`` on a higher-is-better metric or ``above`` on a
    lower-is-better one) and ``source`` (file and index of the reference).
    Raises ConfigError when a reference's unit differs from the record's.
    """
    status = record.get("status")
    if status in BAD_STATUSES:
        return [
            {
                "metric": ref.metric, "value": None, "reference": ref.value,
                "lower": ref.lower, "upper": ref.upper, "unit": ref.unit or "",
                "verdict": status, "higher_is_better": None, "passed": False,
                "source": ref.source,
            }
            for ref in refs
            if ref.matches(record)
        ]  # fmt: skip
    if status != "ok":
        return []
    by_name = {m["name"]: m for m in record.get("metrics") or []}
    out = []
    for ref in refs:
        m = by_name.get(ref.metric)
        if m is None or not ref.matches(record):
            continue
        if ref.unit is not None and ref.unit != m["unit"]:
            raise ConfigError(
                f"{ref.source}: unit {ref.unit!r}, but {ref.metric} is recorded in "
                f"{m['unit']!r}; fix the reference's unit (and value)"
            )
        measured = float(m["value"])
        verdict = ref.verdict(measured)
        failing = "below" if m["higher_is_better"] else "above"
        out.append(
            {
                "metric": ref.metric,
                "value": measured,
                "reference": ref.value,
                "lower": ref.lower,
                "upper": ref.upper,
                "unit": m["unit"],
                "verdict": verdict,
                "higher_is_better": bool(m["higher_is_better"]),
                "passed": verdict != failing,
                "source": ref.source,
            }
        )
    return out


def _listed(values: Iterable[Any]) -> str:
    got = sorted({str(v) for v in values})
    return ", ".join(got[:6]) + (" ..." if len(got) > 6 else "")


def why_unused(ref: Reference, records: Sequence[dict[str, Any]]) -> str:
    """Why ``ref`` matched no record of a run: the first of its match keys that leaves no
    record, with what the run's records have there (a typo, ``params = { row = 2048 }`` for
    ``rows``, read "matched no record" with nothing on which key)."""
    left = [r for r in records
            if (r["benchmark"]["level"], r["benchmark"]["name"]) == (ref.level, ref.benchmark)]  # fmt: skip
    if not left:
        return f"this run has no {ref.level} {ref.benchmark} record"
    for key, want in ref.params.items():
        has = [r for r in left if key in r["benchmark"]["params"]]
        if not has:
            theirs = _listed(k for r in left for k in r["benchmark"]["params"])
            return f"no {ref.benchmark} record has params.{key} (theirs: {theirs})"
        same = [r for r in has if r["benchmark"]["params"][key] == want]
        if not same:
            theirs = _listed(r["benchmark"]["params"][key] for r in has)
            return f"no {ref.benchmark} record has params.{key} = {want!r} (theirs: {theirs})"
        left = same
    for key, want, get in (
        ("dtype", ref.dtype, lambda r: r["dtype"]),
        ("framework", ref.framework, lambda r: r["framework"]["name"]),
        ("world_size", ref.world_size, lambda r: r["world_size"]),
        ("device_kind", ref.device_kind, lambda r: (r.get("device") or {}).get("kind")),
    ):
        if want is None:
            continue
        same = [r for r in left if get(r) == want]
        if not same:
            return f"no {ref.benchmark} record has {key} {want} (theirs: {_listed(map(get, left))})"
        left = same
    if ref.device is not None:
        names = [str((r.get("device") or {}).get("name")) for r in left]
        if not any(ref.device.lower() in n.lower() for n in names):
            return f"no {ref.benchmark} record's device name holds {ref.device!r} (theirs: {_listed(names)})"
    left = [r for r in left if ref.matches(r)]
    if ref.device_attrs and not left:
        return f"no {ref.benchmark} record's device has {ref.device_attrs}"
    if left and all(r.get("status") == "skipped" for r in left):
        return f"its {len(left)} record(s) were skipped (nothing measured)"
    carried = {m["name"] for r in left for m in r.get("metrics") or []}
    if left and ref.metric not in carried:
        return f"its records carry no {ref.metric} (they carry {_listed(carried)})"
    return "no record matched"


def _rel(x: float | None, sign: str) -> str:
    return f"{sign}∞" if x is None else f"{x:+.0%}"


def check_references_main(
    run_dir: Path, ref_files: list[Path], console: Console, include_busy: bool = False
) -> int:
    """Print each record's verdicts against the references; 1 if any is failing, 2 if no
    reference matched a record (a gate that checked nothing has not passed), else 0.

    ``run_dir``: a run directory or results.jsonl; ``ref_files``: references files or
    directories of them. A value measured while the quiet check found other load is "busy"
    and fails nothing, as in ``dlsuite compare``, unless ``include_busy``. Bad input raises
    ConfigError.
    """
    from rich.markup import escape

    from suite.compare import one_record_a_task
    from suite.report.load import load_run
    from suite.summary import busy_findings, figure_cells, figure_table, fmt_seconds

    run = load_run(Path(run_dir))
    one_record_a_task("", run, "check")  # two runs joined: rows alike, from which run unsaid
    refs = load_references(ref_files)
    t = figure_table(f"dlsuite references: {run.results}", ("value", "reference", "bounds"))
    n = failing = busy = 0
    used: set[str] = set()
    for rec in run.records:
        for v in check(rec, refs):
            n += 1
            used.add(v["source"])
            if v["value"] is not None and not include_busy and busy_findings(rec):
                # other load may have made the value or hidden it: shown, not judged
                v = {**v, "verdict": f"busy ({v['verdict']})", "passed": True}
                busy += 1
            failing += not v["passed"]

            def fmt(x: float | None, unit: str = v["unit"], status: str = v["verdict"]) -> str:
                if x is None:  # a task that did not finish: no value
                    return status
                return fmt_seconds(x) if unit == "s" else f"{x:.4g} {unit}".strip()

            style = (
                "green" if v["verdict"] == "within" else "red bold" if not v["passed"] else "yellow"
            )  # yellow: outside in the direction that passes, or busy
            t.add_row(
                *figure_cells(rec),
                v["metric"] + {True: " ↑", False: " ↓", None: ""}[v["higher_is_better"]],
                fmt(v["value"]),
                fmt(v["reference"]),
                f"{_rel(v['lower'], '-')} / {_rel(v['upper'], '+')}",
                f"[{style}]{v['verdict']}[/]",
            )
    if n:
        console.print(t)
    unused = [r for r in refs if r.source not in used]
    for r in unused:
        what = (r.benchmark, r.dtype, r.metric)
        console.print(
            f"[yellow]unused[/]: {escape(r.source)} ({' '.join(filter(None, what))}) "
            f"matched no record of this run: {escape(why_unused(r, run.records))}"
        )
    if not n:
        console.print(
            "[red bold]no reference matched any record of this run: nothing was checked[/] "
            "(exit code 2: a gate that checked nothing has not passed; the unused lines above "
            "say what each reference asked for that this run does not have)"
        )
    console.print(
        f"{n} verdict(s) from {len(refs)} reference(s): {n - failing - busy} pass, "
        + (f"[red bold]{failing} failing[/]" if failing else "0 failing")
        + (
            f", [yellow]{busy} not judged[/] (measured while the machine was busy: rerun on a "
            "quiet machine, or --include-busy)"
            if busy
            else ""
        )
    )
    if not n:
        return 2
    return 1 if failing else 0
