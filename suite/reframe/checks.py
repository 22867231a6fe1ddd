"""What the ReFrame test library (``suite/reframe/dlsuite_checks.py``) needs from the suite, without ReFrame.

The library's tests run ``dlsuite run`` as ReFrame's executable and judge its records. The
logic lives here, host side and framework-free, so it is typed, unit-tested as text and shared
with ``dlsuite reframe``:

* :func:`dlsuite_command`: the command line a test runs (``--scheduler none``: ReFrame owns
  the job; ranks start with the site's launcher inside it).
* :func:`sanity_problems`: every record ok, every correctness check passed, every record
  schema-valid, and the records' device the one the site profile says the partition has.
* :func:`figures` and :func:`perf_variable_name`: one performance variable per figure (every
  metric of every record: median time, FLOP rate, busbw, samples/s...) with its unit.
* :func:`partition_references` and :func:`reframe_reference`: references per
  ``system:partition`` taken from the suite's own ``references/``: a site partition declares
  the device its records show (``[partitions.X] device = {...}``); the references that match
  that device and the test's level, benchmark, framework and dtype are the partition's; once
  the records name the figures, each is bound to the figure it matches, as a ReFrame reference
  tuple. Nothing is copied: the references files are read when the tests load.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.errors import ConfigError, SchemaError
from suite.references import Reference
from suite.sites import Partition, Site

#: ReFrame partition extras the generated configuration carries (suite/reframe/config.py)
EXTRA_SITE = "dlsuite_site"
EXTRA_PARTITION = "dlsuite_partition"
#: the ReFrame feature of the partitions and the environment the library's tests run on
FEATURE = "dlsuite"

#: test parameters a centre sets in the environment of `reframe` (comma-separated lists)
ENV_FRAMEWORKS = "DLSUITE_REFRAME_FRAMEWORKS"
ENV_DTYPES = "DLSUITE_REFRAME_DTYPES"
ENV_WORLD_SIZES = "DLSUITE_REFRAME_WORLD_SIZES"
DEFAULT_DTYPES = ("fp32",)
DEFAULT_WORLD_SIZES = (2,)

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.,=@+\[\]-]")


# -- the tests' parameter space ------------------------------------------------------------
def _env_list(var: str, env: Mapping[str, str]) -> list[str] | None:
    from suite.config import split_list

    value = env.get(var)
    if value is None:
        return None
    items = split_list(value)
    if not items:
        raise ConfigError(
            f"{var}={value!r}: an empty list; give comma-separated values or unset it"
        )
    return items


#: the adapter word a whole level needs (the operator level: each benchmark's own words)
LEVEL_WORDS = {"network": "network", "distributed": "distributed"}


def unsupported(level: str, benchmark: str, framework: str) -> str | None:
    """Why ``framework``'s adapter cannot run ``benchmark`` at all (None when it can), from the
    adapter's declared levels and words: the library skips such a test, as the suite records a
    skip, instead of failing it. Nothing is imported but the adapter's class."""
    from suite.adapters import ADAPTERS
    from suite.levels import load_benchmark

    cls = ADAPTERS.load(framework)
    if level not in cls.levels:
        return cls.levels_reason or f"{framework} does not run the {level} level"
    need = {LEVEL_WORDS[level]} if level in LEVEL_WORDS else set()
    need |= set(getattr(load_benchmark(level, benchmark), "words", ()))
    missing = sorted(need - cls.words)
    if missing:
        return f"{framework} does not implement the word(s) {', '.join(missing)}" + (
            cls.missing_because(missing)
        )
    return None


def frameworks(env: Mapping[str, str] | None = None, level: str | None = None) -> list[str]:
    """The frameworks the tests run: ``$DLSUITE_REFRAME_FRAMEWORKS``, else every framework that
    imports in this interpreter or whose venv is built (no framework is imported to find out),
    and, given a ``level``, whose adapter runs that level (its levels and words)."""
    from suite.adapters import ADAPTERS

    e = os.environ if env is None else env
    names = ADAPTERS.names()
    given = _env_list(ENV_FRAMEWORKS, e)
    if given is not None:
        for name in given:
            if name not in names:
                raise ConfigError(
                    f"{ENV_FRAMEWORKS}: unknown framework {name!r}; use some of: {', '.join(names)}"
                )
        return [n for n in given if level is None or _runs_level(n, level)]
    from suite import envs
    from suite.errors import SuiteError

    out = []
    for name in names:
        try:
            if ADAPTERS.load(name).available()[0] or envs.env_for(name).built:
                out.append(name)
        except SuiteError:
            continue  # no adapter class or no environment recipe: not runnable here
    return [n for n in out if level is None or _runs_level(n, level)]


def _runs_level(framework: str, level: str) -> bool:
    from suite.adapters import ADAPTERS

    cls = ADAPTERS.load(framework)
    word = LEVEL_WORDS.get(level)
    return level in cls.levels and (word is None or word in cls.words)


def dtypes(env: Mapping[str, str] | None = None) -> list[str]:
    """``$DLSUITE_REFRAME_DTYPES``, else fp32 (every adapter runs it on every device)."""
    from suite.dtypes import DTYPES

    given = _env_list(ENV_DTYPES, os.environ if env is None else env)
    for d in given or []:
        if d not in DTYPES:
            raise ConfigError(
                f"{ENV_DTYPES}: unknown dtype {d!r}; use some of: {', '.join(DTYPES)}"
            )
    return given or list(DEFAULT_DTYPES)


def world_sizes(env: Mapping[str, str] | None = None) -> list[int]:
    """``$DLSUITE_REFRAME_WORLD_SIZES`` (the distributed tests' ranks), else 2."""
    given = _env_list(ENV_WORLD_SIZES, os.environ if env is None else env)
    if given is None:
        return list(DEFAULT_WORLD_SIZES)
    try:
        sizes = [int(v) for v in given]
    except ValueError:
        sizes = []
    if not sizes or any(s < 1 for s in sizes):
        raise ConfigError(f"{ENV_WORLD_SIZES}={','.join(given)}: give positive integers, e.g. 2,4")
    return sizes


def benchmarks(level: str) -> list[str]:
    """The level's benchmarks, from its registry. The network level's ``agreement`` compares
    several frameworks in one run, so it is no test of one framework and is left out."""
    from suite.levels import benchmark_names

    return [b for b in benchmark_names(level) if not (level == "network" and b == "agreement")]


# -- the site partition behind a ReFrame partition -----------------------------------------
@dataclass(frozen=True)
class SitePartition:
    site: Site
    partition: Partition

    @property
    def label(self) -> str:
        return f"site {self.site.name} ({self.site.path}), partition {self.partition.name}"


def site_partition(extras: Mapping[str, Any], rfm_partition: str) -> SitePartition:
    """The site profile and partition a ReFrame partition was generated from (its extras)."""
    from suite import sites

    path, name = extras.get(EXTRA_SITE), extras.get(EXTRA_PARTITION)
    if not path or not name:
        raise ConfigError(
            f"ReFrame partition {rfm_partition}: no {EXTRA_SITE}/{EXTRA_PARTITION} extras; "
            "generate its configuration with `dlsuite reframe config --site SITE`"
        )
    site = sites.load(str(path))
    if name not in site.partitions:
        raise ConfigError(
            f"ReFrame partition {rfm_partition}: site {site.name} ({site.path}) has no partition "
            f"{name!r} (it has {', '.join(sorted(site.partitions))}); generate the configuration "
            "again: dlsuite reframe config --site SITE"
        )
    return SitePartition(site, site.partitions[name])


def partition_device(p: Partition) -> dict[str, Any] | None:
    """What the records of partition ``p`` show as their device, as far as the site profile
    says: its ``device`` table, with ``kind = "cpu"`` on a partition without GPUs. None when
    nothing is known (then only references without device keys apply)."""
    dev = dict(p.device or {})
    if not p.gpus_per_node:
        dev.setdefault("kind", "cpu")
    return dev or None


# -- the command a test runs ---------------------------------------------------------------
def dlsuite_command(
    *,
    python: str,
    site: Path,
    level: str,
    benchmark: str,
    framework: str,
    dtype: str,
    out: str,
    world_size: int = 1,
    nodes: int = 1,
    quick: bool = True,
    config: str | None = None,
    timeout: float | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """``dlsuite run`` for one test, as a list of arguments (the library quotes each one).

    ``--scheduler none``: ReFrame's scheduler owns the job and the suite must not submit a
    second one from inside it; ``--site`` still gives the backend and the launcher (srun on a
    Slurm site: the ranks start inside ReFrame's allocation)."""
    argv = [python, "-m", "suite", "run", "--site", str(site), "--scheduler", "none",
            "--level", level, "--benchmark", benchmark, "--framework", framework,
            "--dtype", dtype, "--out", out]  # fmt: skip
    argv.append("--quick" if quick else "--no-quick")
    if level == "distributed":
        argv += ["--world-size", str(world_size), "--nodes", str(nodes)]
    if config:
        argv += ["--config", config]
    if timeout is not None:
        argv += ["--timeout", f"{timeout:g}"]
    return argv + list(extra)


# -- sanity ----------------------------------------------------------------------------------
def read_results(path: Path) -> list[dict[str, Any]]:
    """The records of ``results.jsonl`` (a line that is no JSON is a SchemaError)."""
    from suite.results import read_records

    return list(read_records(Path(path)))


def _describe(rec: dict[str, Any]) -> str:
    b = rec.get("benchmark") or {}
    params = ",".join(f"{k}={v}" for k, v in sorted((b.get("params") or {}).items()))
    return f"{b.get('name', '?')}[{params}] w{rec.get('world_size', '?')}"


def device_problem(rec: dict[str, Any], declared: Mapping[str, Any]) -> str | None:
    """Why ``rec`` did not run on the ``declared`` device (None when it did)."""
    dev = rec.get("device") or {}
    name = declared.get("name")
    if name is not None and str(name).lower() not in str(dev.get("name", "")).lower():
        return f"device {dev.get('name')!r} is not the declared {name!r}"
    for key, want in declared.items():
        if key != "name" and dev.get(key) != want:
            return f"device {key} = {dev.get(key)!r}, declared {want!r}"
    return None


def sanity_problems(
    records: Sequence[dict[str, Any]],
    *,
    declared_device: Mapping[str, Any] | None = None,
    where: str = "",
) -> list[str]:
    """Every reason the records fail the test, one line each (empty: sanity passes).

    No records; a record not ``ok`` (failed, timeout, oom, skipped: with its reason); a failed
    correctness check (each named); a record that is not schema-valid (the first bad field);
    a record whose device is not the one the site profile declares for the partition."""
    from suite.results import validate_record

    if not records:
        return ["no records: dlsuite run wrote nothing (see the test's stdout and stderr)"]
    problems = []
    for rec in records:
        what = _describe(rec)
        try:
            validate_record(rec)
        except SchemaError as exc:
            problems.append(f"{what}: not schema-valid: {exc}")
            continue
        if rec["status"] != "ok":
            why = rec.get("reason") or (rec.get("error") or {}).get("message") or ""
            problems.append(f"{what}: status {rec['status']}" + (f" ({why})" if why else ""))
            continue
        correctness = rec.get("correctness") or {}
        failed = [c["name"] for c in correctness.get("checks", []) if not c.get("passed")]
        if failed or not correctness.get("passed"):
            problems.append(
                f"{what}: correctness failed ({', '.join(failed) or 'no passing verdict'})"
            )
        if declared_device:
            why = device_problem(rec, declared_device)
            if why:
                problems.append(
                    f"{what}: {why}{' in ' + where if where else ''}; fix the partition's device "
                    "in the site profile (it decides which references apply)"
                )
    return problems


# -- figures: one performance variable per metric of every record -----------------------------
@dataclass(frozen=True)
class Figure:
    value: float
    unit: str
    higher_is_better: bool
    metric: str
    record: int  # index in the records


def _param_text(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def record_label(rec: dict[str, Any]) -> str:
    """``gemm[k=256,m=256,n=256]``; distributed records add their ranks: ``allreduce[...]@w2``.

    Only characters ReFrame's perflogs, reference scopes (``:``) and comparison specs (``/``)
    leave alone; anything else becomes ``_``."""
    b = rec["benchmark"]
    params = ",".join(f"{k}={_param_text(v)}" for k, v in sorted(b["params"].items()))
    label = f"{b['name']}[{params}]"
    if b["level"] == "distributed":
        label += f"@w{rec['world_size']}"
    return _NAME_UNSAFE.sub("_", label)


def perf_variable_name(rec: dict[str, Any], metric: str) -> str:
    return f"{record_label(rec)}.{_NAME_UNSAFE.sub('_', metric)}"


def figures(records: Sequence[dict[str, Any]]) -> dict[str, Figure]:
    """Every figure of the ok records, by performance-variable name, in record order: each
    metric's headline value (the median for a time) and its unit. A name two records share
    (the same benchmark point twice) gets ``#2``, ``#3``..."""
    out: dict[str, Figure] = {}
    for i, rec in enumerate(records):
        if rec.get("status") != "ok":
            continue
        for m in rec.get("metrics") or []:
            value = m.get("value")
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if not math.isfinite(value):
                continue
            name = base = perf_variable_name(rec, m["name"])
            n = 1
            while name in out:
                n += 1
                name = f"{base}#{n}"
            out[name] = Figure(float(value), m["unit"], bool(m["higher_is_better"]), m["name"], i)
    return out


# -- references ------------------------------------------------------------------------------
def _without_device(ref: Reference) -> Reference:
    return dataclasses.replace(ref, device=None, device_kind=None, device_attrs={})


def partition_references(
    refs: Iterable[Reference],
    device: Mapping[str, Any] | None,
    *,
    level: str,
    benchmark: str,
    framework: str,
    dtype: str,
) -> list[Reference]:
    """The references of one test on one partition: those whose device keys match the
    partition's ``device`` (see :func:`partition_device`) and whose level, benchmark,
    framework and dtype are the test's. Params and world size are matched later, against each
    record (a test's records are a sweep)."""
    probe = {
        "benchmark": {"level": level, "name": benchmark, "params": {}},
        "dtype": dtype,
        "framework": {"name": framework},
        "world_size": None,
        # Reference.matches reads a device's name and kind: an undeclared one matches nothing
        "device": {"name": "", "kind": None, **device} if device else None,
    }
    return [
        ref for ref in refs if dataclasses.replace(ref, params={}, world_size=None).matches(probe)
    ]


RefTuple = tuple[float, float | None, float | None, str]


def reference_tuple(ref: Reference, higher_is_better: bool) -> RefTuple | None:
    """``(value, lower, upper, unit)`` for ReFrame, with the suite's rule kept: only the bound
    on the failing side is given (``below`` fails a higher-is-better figure, ``above`` a
    lower-is-better one), so a faster run never fails a ReFrame check. ReFrame bounds a
    non-negative reference's lower threshold at -1; a negative reference value is not mapped
    (None: the metrics are non-negative)."""
    if ref.value < 0:
        return None
    unit = ref.unit or ""
    if higher_is_better:
        lower = None if ref.lower is None else max(-1.0, ref.lower)
        return (ref.value, lower, None, unit)
    return (ref.value, None, ref.upper, unit)


def busy_figures(records: Sequence[dict[str, Any]]) -> list[str]:
    """The performance variables of records measured while the quiet-machine check found
    other load (``suite.summary.busy_findings``)."""
    from suite.summary import busy_findings

    return [n for n, f in figures(records).items() if busy_findings(records[f.record])]


def busy_note(records: Sequence[dict[str, Any]], judged: bool) -> str | None:
    """The line a test logs when some of its figures were measured busy (None when none)."""
    from suite.summary import busy_findings

    busy = busy_figures(records)
    if not busy:
        return None
    first = next(f for r in records for f in busy_findings(r))
    if judged:
        return (
            f"{len(busy)} figure(s) measured while the machine was busy ({first}), judged "
            "against their references as dlsuite_include_busy asks"
        )
    return (
        f"{len(busy)} figure(s) measured while the machine was busy ({first}): logged, not "
        "judged against their references (as dlsuite check-references leaves them); rerun on "
        "a quiet machine, add -S dlsuite_args=--require-quiet to refuse such tasks (sanity "
        "fails), or -S dlsuite_include_busy=true to judge them"
    )


def reframe_reference(
    records: Sequence[dict[str, Any]], refs: Sequence[Reference], include_busy: bool = False
) -> dict[str, RefTuple]:
    """The ReFrame reference of every figure a reference of ``refs`` (already the partition's:
    :func:`partition_references`) applies to: the first one that matches the record (params,
    world size) and carries the figure's metric. A reference's unit that differs from the
    record's is a ConfigError naming the reference, as in ``dlsuite check-references``. A
    figure measured busy gets none unless ``include_busy``: it fails nothing, as in
    ``dlsuite check-references`` (:func:`busy_note` says so)."""
    out: dict[str, RefTuple] = {}
    busy = set() if include_busy else set(busy_figures(records))
    for name, fig in figures(records).items():
        rec = records[fig.record]
        for ref in refs:
            if ref.metric != fig.metric or not _without_device(ref).matches(rec):
                continue
            if ref.unit is not None and ref.unit != fig.unit:
                raise ConfigError(
                    f"{ref.source}: unit {ref.unit!r}, but {ref.metric} is recorded in "
                    f"{fig.unit!r}; fix the reference's unit (and value)"
                )
            t = reference_tuple(dataclasses.replace(ref, unit=fig.unit), fig.higher_is_better)
            if name in busy:  # its unit is still checked above: a wrong reference is an error
                break
            if t is not None:
                out[name] = t
                break
    return out
