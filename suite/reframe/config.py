"""``dlsuite reframe ...``: a ReFrame system configuration from a site profile, and the
references each of its partitions gets.

    dlsuite reframe config --site SITE [--partition P ...] [--system NAME] [--hostname RE ...]
                           [--slurm-scheduler squeue|slurm] [--modules-system NAME]
                           [--results-db FILE] [--out FILE] [--no-check]
    dlsuite reframe references --site SITE [--partition P ...] [--references PATH ...]

The site profile stays the one description of the cluster: ``config`` renders the ReFrame
configuration (a Python file, ``site_configuration = {...}``) as text, without importing
ReFrame, then has ReFrame itself load it (``--no-check`` skips that). Each partition carries
the site and partition it came from in its ``extras``, which is how the test library in
``suite/reframe/dlsuite_checks.py`` finds the partition's launcher, backend and device when the tests
load. docs/guide/integrations.md says what each field maps to and why.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.errors import ConfigError

if TYPE_CHECKING:  # the parser is built on every dlsuite call: the rest loads when used
    from suite.sites import Partition, Site

#: ReFrame releases the library is written for (the results database and
#: --performance-compare came in 4.7)
REFRAME_REQUIREMENT = "reframe-hpc>=4.7,<5"
SLURM_SCHEDULERS = ("squeue", "slurm")
MODULES_SYSTEMS = ("lmod", "tmod", "tmod4", "tmod32", "envmod", "spack")
_RFM_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]*$")

#: one perflog line per performance variable (``perflog_multiline``): the figure, its unit,
#: the reference and its bounds, the figure's verdict and the test's; ``|`` never occurs in a
#: variable's name
PERFLOG_FORMAT = (
    "%(check_job_completion_time)s|%(check_display_name)s|%(check_system)s:%(check_partition)s|"
    "%(check_environ)s|%(check_perf_var)s|%(check_perf_value)s|%(check_perf_unit)s|"
    "%(check_perf_ref)s|%(check_perf_lower_thres)s|%(check_perf_upper_thres)s|%(check_perf_result)s|%(check_result)s"
)


def rfm_name(name: str) -> str:
    """A site or partition name as ReFrame accepts it (``^[a-zA-Z_][a-zA-Z0-9_-]*$``): ``.``
    becomes ``_`` and a leading digit gets a ``_`` before it. The original stays in extras."""
    out = name.replace(".", "_")
    if not out[:1].isalpha() and out[:1] != "_":
        out = "_" + out
    return out


def _rfm_time(text: str) -> str:
    """A Slurm time (``1-00:00:00``) as a ReFrame duration (``86400s``)."""
    from suite.sites import parse_time

    return f"{parse_time(text)}s"


def select_partitions(site: Site, names: Sequence[str] | None) -> list[Partition]:
    """The site's partitions named (all when ``names`` is empty); an unknown one is a
    ConfigError listing the site's partitions."""
    if not names:
        return list(site.partitions.values())
    out = []
    for name in names:
        if name not in site.partitions:
            raise ConfigError(
                f"--partition {name!r}: site {site.name} ({site.path}) has no such partition; "
                f"use one of: {', '.join(sorted(site.partitions))}"
            )
        out.append(site.partitions[name])
    return out


def partition_config(site: Site, p: Partition, *, scheduler: str) -> dict[str, Any]:
    """One ReFrame partition from one site partition.

    ReFrame's launcher is ``local``: the test's executable is ``dlsuite run``, which plans,
    starts the ranks with the site's launcher (srun inside the allocation) and collects the
    records: started by ``srun`` it would run once per rank. Every sbatch setting of the site
    (partition, account, QoS, reservation, constraint, memory, further options) becomes an
    ``access`` option; GPUs are a ``gpu`` resource with the site's ``--gres``."""
    from suite.reframe.checks import EXTRA_PARTITION, EXTRA_SITE, FEATURE

    access: list[str] = []
    if site.scheduler == "slurm":
        access.append(f"--partition={p.name}")
        for opt, value in (("account", site.account), ("qos", site.qos),
                           ("reservation", site.reservation), ("constraint", p.constraint),
                           ("mem", p.mem)):  # fmt: skip
            if value:
                access.append(f"--{opt}={value}")
        access += list(site.sbatch_options)
    env = dict(site.env)
    if site.image_dir:
        env.setdefault("DLSUITE_IMAGE_DIR", site.image_dir)
    part: dict[str, Any] = {
        "name": rfm_name(p.name),
        "descr": f"{site.name}: partition {p.name}"
        + (f" ({p.gpus_per_node} GPU(s) per node)" if p.gpus_per_node else " (CPU)"),
        "scheduler": scheduler,
        "launcher": "local",
        "access": access,
        "environs": ["dlsuite"],
        "features": [FEATURE, "gpu" if p.gpus_per_node else "cpu"],
        "extras": {EXTRA_SITE: str(site.path), EXTRA_PARTITION: p.name},
    }
    if env:
        # ReFrame writes `export NAME=VALUE` into the job script: quote the value, as the
        # suite's own batch scripts do (site values are never expanded by a shell)
        part["env_vars"] = [[k, shlex.quote(v)] for k, v in env.items()]
    if site.modules:
        part["modules"] = list(site.modules)
        if site.module_purge:
            part["prepare_cmds"] = ["module purge"]
    if p.default_time:
        part["time_limit"] = _rfm_time(p.default_time)
    if site.array_parallelism or site.scheduler == "none":
        # benchmarks on one machine run one at a time (ReFrame's local scheduler would run
        # 8 at once, sharing the cores and distorting every timing)
        part["max_jobs"] = site.array_parallelism or 1
    if p.cpus_per_node:
        part["processor"] = {"num_cpus": p.cpus_per_node}
    if p.gpus_per_node:
        part["devices"] = [{"type": "gpu", "num_devices": p.gpus_per_node}]
        if p.gpu_gres:
            part["resources"] = [{"name": "gpu", "options": [f"--gres={p.gpu_gres}"]}]
    return part


def site_configuration(
    site: Site,
    *,
    partitions: Sequence[str] | None = None,
    system: str | None = None,
    hostnames: Sequence[str] = (".*",),
    slurm_scheduler: str = "squeue",
    modules_system: str | None = None,
    results_db: str | None = None,
) -> dict[str, Any]:
    """ReFrame's ``site_configuration`` for ``site`` (a plain dict; see :func:`render`)."""
    from suite.reframe.checks import FEATURE

    if slurm_scheduler not in SLURM_SCHEDULERS:
        raise ConfigError(
            f"--slurm-scheduler {slurm_scheduler!r}: use squeue (no Slurm accounting needed) or "
            "slurm (sacct: needs slurmdbd)"
        )
    name = system or rfm_name(site.name)
    if not _RFM_NAME.match(name):
        raise ConfigError(
            f"--system {name!r}: ReFrame system names hold letters, digits, _ and - and start "
            "with a letter or _; give another --system"
        )
    if site.modules and modules_system is None:
        modules_system = "lmod"
    if modules_system is not None and modules_system not in MODULES_SYSTEMS:
        raise ConfigError(
            f"--modules-system {modules_system!r}: use one of: {', '.join(MODULES_SYSTEMS)}"
        )
    scheduler = slurm_scheduler if site.scheduler == "slurm" else "local"
    parts = [
        partition_config(site, p, scheduler=scheduler) for p in select_partitions(site, partitions)
    ]
    seen: dict[str, str] = {}
    for p, cfg in zip(select_partitions(site, partitions), parts, strict=True):
        if cfg["name"] in seen:
            raise ConfigError(
                f"site {site.path}: partitions {seen[cfg['name']]!r} and {p.name!r} are both "
                f"{cfg['name']!r} in ReFrame (. becomes _); rename one"
            )
        seen[cfg["name"]] = p.name
    sys_cfg: dict[str, Any] = {
        "name": name,
        "descr": site.description or f"dlsuite site {site.name}",
        "hostnames": list(hostnames),
        "modules_system": modules_system or "nomod",
        "partitions": parts,
    }
    storage: dict[str, Any] = {"enable": True}
    if results_db:
        storage["sqlite_db_file"] = results_db
    return {
        "systems": [sys_cfg],
        "environments": [{"name": "dlsuite", "features": [FEATURE], "target_systems": [name]}],
        "logging": [
            {
                # a logging section replaces ReFrame's builtin one: keep its console and log
                "handlers$": [
                    {"type": "stream", "name": "stdout", "level": "info", "format": "%(message)s"}
                ],
                "handlers": [
                    {
                        "type": "file",
                        "level": "debug2",
                        "format": "[%(asctime)s] %(levelname)s: %(check_info)s: %(message)s",
                        "append": False,
                    }
                ],
                "perflog_multiline": True,
                "handlers_perflog": [
                    {
                        "type": "filelog",
                        "prefix": "%(check_system)s/%(check_partition)s",
                        "level": "info",
                        "format": PERFLOG_FORMAT,
                        "append": True,
                    }
                ],
                "target_systems": [name],
            }
        ],
        "storage": [{**storage, "target_systems": [name]}],
    }


def _py(value: Any, indent: int = 0) -> str:
    """A Python literal, one key or item per line, deterministic."""
    pad, inner = "    " * indent, "    " * (indent + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{inner}{k!r}: {_py(v, indent + 1)}," for k, v in value.items()]
        return "{\n" + "\n".join(items) + f"\n{pad}}}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        if all(isinstance(v, (str, int, float)) for v in value) and len(repr(value)) < 80:
            return repr(list(value))
        return "[\n" + "\n".join(f"{inner}{_py(v, indent + 1)}," for v in value) + f"\n{pad}]"
    return repr(value)


def render(config: dict[str, Any], site: Site, argv: Sequence[str] = ()) -> str:
    """The configuration file's text."""
    command = "dlsuite " + " ".join(shlex.quote(a) for a in argv)
    return (
        f"# ReFrame configuration of dlsuite site {site.name!r}, generated from {site.path}\n"
        f"# by: {command.strip()}\n"
        "# Do not edit: change the site profile and generate it again. The test library is\n"
        "# suite/reframe/dlsuite_checks.py (docs/guide/integrations.md):\n"
        "#   reframe -C THIS_FILE -c suite/reframe -r\n"
        f"site_configuration = {_py(config)}\n"
    )


# -- checking with ReFrame itself ----------------------------------------------------------
def reframe_executable() -> str:
    """``reframe`` next to this interpreter, else on PATH; a ConfigError naming the install."""
    here = Path(sys.executable).parent / "reframe"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    found = shutil.which("reframe")
    if found:
        return found
    raise ConfigError(
        f"ReFrame is not installed: pip install '{REFRAME_REQUIREMENT}' (it is in dlsuite's dev "
        "extra), or give --no-check to write the configuration without loading it"
    )


def check_with_reframe(path: Path, system: str) -> None:
    """Have ReFrame load and validate the configuration file (``--show-config``)."""
    exe = reframe_executable()
    path = Path(path).resolve()
    with tempfile.TemporaryDirectory(prefix="dlsuite-rfm-check-") as tmp:
        try:
            out = subprocess.run(
                [exe, "-C", str(path), "--system", system, "--show-config=systems/0/name"],
                capture_output=True, text=True, timeout=120, cwd=tmp,
                env={**os.environ, "RFM_PREFIX": tmp},
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConfigError(f"{exe} could not check {path}: {exc}") from None
    if out.returncode != 0 or system not in out.stdout:
        text = re.sub(r"\x1b\[[0-9;]*m", "", out.stderr + out.stdout)  # ReFrame's colours
        lines = [ln for ln in text.splitlines() if ln.strip()]
        why = next((ln for ln in lines if "error" in ln.lower()), lines[-1] if lines else "")
        raise ConfigError(
            f"ReFrame does not accept the generated configuration {path}: {why.strip()} "
            "(please report it; --no-check writes it anyway)"
        )


def default_references() -> Path:
    from suite.provenance import SOURCE_ROOT

    return SOURCE_ROOT / "references"
