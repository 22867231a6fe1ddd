"""Reading runs for ``dlsuite report`` and ``dlsuite compare``: validated records plus metadata.

A *run* is given as a run directory (holding ``results.jsonl``) or as a ``results.jsonl`` file.
Every record is validated against ``schemas/result.schema.json``; a bad one is bad input
(:class:`~suite.errors.ConfigError`, one line naming the file, the line and the field).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.errors import ConfigError, SchemaError
from suite.results import validate_record
from suite.rundir import LOCK_NAME, runner_alive

RESULTS_FILE = "results.jsonl"
TELEMETRY_DIR = "telemetry"


@dataclass
class Run:
    """One run: its directory, its validated records and what else it holds."""

    path: Path  # the run directory
    results: Path  # its results.jsonl
    records: list[dict[str, Any]]
    manifest: dict[str, Any] | None = None
    label: str = ""  # unique among the runs of one report; the directory name where possible
    notes: list[str] = field(default_factory=list)  # what was tolerated while reading
    #: whether a ``dlsuite run`` held the directory's lock just before it was read (None: no
    #: lock file, e.g. a copied directory)
    runner_alive: bool | None = None

    @property
    def telemetry_dir(self) -> Path:
        return self.path / TELEMETRY_DIR

    @property
    def planned(self) -> list[str]:
        """The task ids the run planned (its manifest's ``tasks``; empty without a manifest)."""
        tasks = (self.manifest or {}).get("tasks")
        return [str(t) for t in tasks] if isinstance(tasks, list) else []

    @property
    def unrecorded(self) -> list[str]:
        """Planned tasks with no record in results.jsonl: never run, or run when the run was
        stopped (Ctrl-C, a killed job) or is still running; ``--resume`` runs them."""
        recorded = {r.get("task_id") for r in self.records}
        return [t for t in self.planned if t not in recorded]

    @property
    def state(self) -> str:
        """The manifest's state; a run the manifest calls running that no ``dlsuite run`` holds
        the lock of was killed before it could say so (SIGKILL, a node lost)."""
        manifest = self.manifest or {}
        state = str(manifest.get("state", "-"))
        if state == "running" and self.runner_alive is False:
            return "running per its manifest, but no dlsuite run holds it (killed?)"
        reason = str(manifest.get("stop_reason") or "").strip()
        if state == "stopped" and reason:  # why (a full disk, sbatch refused): the manifest says
            first = reason.splitlines()[0]
            return f"stopped: {first if len(first) <= 300 else first[:299] + '…'}"
        return state


def results_path(path: Path) -> Path:
    """``path/results.jsonl`` for a directory, ``path`` itself for a file; ConfigError if absent."""
    if not path.exists():
        raise ConfigError(f"{path}: no such run directory or results file")
    if path.is_dir():
        results = path / RESULTS_FILE
        if not results.is_file():
            raise ConfigError(
                f"{path}: no {RESULTS_FILE} in this directory; "
                "give a run directory written by `dlsuite run --out DIR` or a results.jsonl file"
            )
        return results
    if path.name == "manifest.json":
        raise ConfigError(
            f"{path}: a run's manifest, not its records; give the run directory {path.parent} "
            f"(or its {RESULTS_FILE})"
        )
    return path


def _not_json(name: str) -> Any:
    """``json.loads``' hook for NaN and Infinity, which JSON does not have (`dlsuite run` writes
    null): a record carrying one was not written by the suite, and a NaN median would reach
    the plots and the comparisons as a number."""
    raise ValueError(f"{name} is not a JSON value (the suite writes null for a missing number)")


def load_run(path: Path) -> Run:
    """Read and validate a run; raises ConfigError for anything that is not a valid run.

    An unterminated, unparsable *last* line (a run killed mid-write, see
    ``ResultsFile.repair``) is ignored with a note; any other bad line is an error.
    """
    results = results_path(Path(path))
    # asked before reading: a run that ends in between has written its state by then
    alive = runner_alive(results.parent / LOCK_NAME)
    try:
        text = results.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{results}: cannot read it ({exc})") from None
    lines = text.split("\n")
    records: list[dict[str, Any]] = []
    notes: list[str] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line, parse_constant=_not_json)
        except ValueError as exc:
            if lineno == len(lines) and not text.endswith("\n"):
                notes.append(f"{results}:{lineno}: ignored a partial last line (run killed?)")
                continue
            raise ConfigError(
                f"{results}:{lineno}: not valid JSON ({exc}); "
                "is this a results.jsonl written by `dlsuite run`?"
            ) from None
        try:
            validate_record(doc)
        except SchemaError as exc:
            raise ConfigError(
                f"{results}:{lineno}: invalid record: {exc} "
                "(see schemas/result.schema.json; `dlsuite validate` checks a whole file)"
            ) from None
        records.append(doc)
    if not records:
        raise ConfigError(f"{results}: holds no records; has the run started yet?")
    run_dir = results.parent
    manifest: dict[str, Any] | None = None
    manifest_path = run_dir / "manifest.json"
    if manifest_path.is_file():
        try:
            loaded = json.loads(manifest_path.read_text(encoding="utf-8"))
            manifest = loaded if isinstance(loaded, dict) else None
        except (OSError, ValueError):
            notes.append(f"{manifest_path}: unreadable, ignored")
    return Run(
        path=run_dir,
        results=results,
        records=records,
        manifest=manifest,
        notes=notes,
        runner_alive=alive,
    )


def load_runs(paths: Sequence[Path], verb: str = "report") -> list[Run]:
    """Load several runs and give each a unique label (the directory name, made unique).

    A file that holds a task's record twice (two runs' results.jsonl joined) is a ConfigError,
    as for ``dlsuite compare``: a report showed each of its rows twice and its summaries
    counted both, and a projection fitted both as if measured once."""
    if not paths:
        raise ConfigError("no run directory given; pass at least one RUN_DIR")
    distinct_runs(
        paths, "give each run once (a run beside itself would be compared with itself, and "
        "counted twice)",
    )  # fmt: skip
    runs = [load_run(Path(p)) for p in paths]
    for run in runs:
        one_record_a_task("", run, verb)
    label_runs(runs)
    return runs


def distinct_runs(paths: Sequence[Path], fix: str) -> None:
    """A ConfigError, ending in ``fix``, when two of ``paths`` name the same results file (a
    directory and its results.jsonl, a symbolic link, ``run`` and ``./run``)."""
    given: dict[Path, Path] = {}
    for p in paths:
        key = results_path(Path(p)).resolve()
        if key in given:
            raise ConfigError(f"{p}: the same run as {given[key]} (both are {key}); {fix}")
        given[key] = Path(p)


def label_runs(runs: Sequence[Run]) -> None:
    """Label each run by its directory name, adding parents (then a number) where names clash."""
    for depth in (1, 2, 3):
        labels = ["/".join(r.path.resolve().parts[-depth:]) for r in runs]
        if len(set(labels)) == len(labels):
            break
    counts: dict[str, int] = {}
    for run, label in zip(runs, labels, strict=True):
        counts[label] = counts.get(label, 0) + 1
        run.label = label if counts[label] == 1 else f"{label} ({counts[label]})"


# -- record accessors shared by report and compare ---------------------------------------------


def metric(record: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The metric ``name`` of a record, or None."""
    for m in record.get("metrics") or []:
        if m["name"] == name:
            found: dict[str, Any] = m
            return found
    return None


def device_name(record: dict[str, Any]) -> str:
    dev = record.get("device")
    return str(dev["name"]) if dev else "?"


def params_key(params: dict[str, Any]) -> str:
    """Canonical text of a parameter set (key order does not matter)."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)


def base_identity(rec: dict[str, Any]) -> tuple[Any, ...]:
    """Task identity without the device: level, benchmark, params, framework, dtype, world
    size and rank (a rank-less record counts as rank 0)."""
    b = rec["benchmark"]
    return (
        b["level"],
        b["name"],
        params_key(b["params"]),
        rec["framework"]["name"],
        rec["dtype"],
        rec["world_size"],
        rec.get("rank") or 0,
    )


def device_identity(rec: dict[str, Any]) -> tuple[str, str] | None:
    dev = rec.get("device")
    return (dev["kind"], dev["name"]) if dev else None


def identity(rec: dict[str, Any]) -> tuple[Any, ...]:
    """The full task identity used to match records across runs."""
    return (*base_identity(rec), device_identity(rec))


def one_record_a_task(side: str, run: Run, verb: str = "compare") -> None:
    """ConfigError where a file holds a task's record twice: a run writes each once (a rerun's
    earlier attempt goes to superseded.jsonl), so it joins runs, and which record to
    ``verb`` is not known. Paired in order, BASE against BASE + NEW said "no regression"
    (BASE's copy paired with itself) and listed NEW's records "only in NEW"; checked against
    references, each copy was a row of its own, the same row twice to the eye."""
    from suite.summary import params_label

    seen: dict[tuple[Any, ...], int] = {}
    for rec in run.records:
        key = identity(rec)
        seen[key] = seen.get(key, 0) + 1
    twice = [k for k, n in seen.items() if n > 1]
    if not twice:
        return
    first = next(r for r in run.records if identity(r) == twice[0])
    runs = sorted({str(r.get("run_id")) for r in run.records if identity(r) in set(twice)})
    raise ConfigError(
        f"{side + ' ' if side else ''}{run.results}: {len(twice)} task(s) have more than one record (e.g. "
        f"{first['benchmark']['name']} {params_label(first)} {first['dtype']} {first['framework']['name']}: {seen[twice[0]]}), from run(s) "
        f"{', '.join(runs[:4])}{' ...' if len(runs) > 4 else ''}; a run writes one record a "
        f"task, so this file joins runs and which record to {verb} is not known: give one "
        "run's results.jsonl (or its run directory)"
    )
