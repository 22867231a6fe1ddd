"""Site profiles: ``sites/<name>.toml``, validated against ``schemas/site.schema.json``.

A site says what a cluster is (partitions, nodes, GPUs per node and their ``--gres``, account,
QoS, time limits, modules, the container runtime and its image directory, the launcher) so that
``dlsuite run --site NAME`` needs no Slurm knowledge on the command line. Like the config file,
bad input is one :class:`~suite.errors.ConfigError` naming the file, the field and the fix.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite import schemas
from suite.errors import ConfigError, SchemaError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SITES_ENV = "DLSUITE_SITES_DIR"
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d{2}))?(?::(\d{2}))?$")


def sites_dirs() -> list[Path]:
    """Where ``--site NAME`` looks, in order: ``$DLSUITE_SITES_DIR``, then ``sites/`` of the
    checkout the suite runs from."""
    from suite.provenance import SOURCE_ROOT

    dirs = []
    if os.environ.get(SITES_ENV):
        dirs.append(Path(os.environ[SITES_ENV]))
    dirs.append(SOURCE_ROOT / "sites")
    return dirs


def parse_time(text: str) -> int:
    """Seconds in a Slurm time string (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
    ``D-HH:MM:SS``), the way sbatch reads them."""
    m = _TIME.fullmatch(text)
    if not m:
        raise ValueError(f"{text!r} is not a Slurm time")
    days, a, b, c = m.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        return int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    if c is not None:  # HH:MM:SS
        return int(a) * 3600 + int(b) * 60 + int(c)
    if b is not None:  # MM:SS
        return int(a) * 60 + int(b)
    return int(a) * 60  # MM


def format_time(seconds: float) -> str:
    """``D-HH:MM:SS`` (or ``HH:MM:SS`` under a day), rounded up to the minute."""
    minutes = max(1, -(-int(seconds) // 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    hms = f"{hours:02d}:{mins:02d}:00"
    return f"{days}-{hms}" if days else hms


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: int
    cpus_per_node: int | None = None
    gpus_per_node: int = 0
    gres: str | None = None
    mem: str | None = None
    constraint: str | None = None
    max_time: str | None = None
    default_time: str | None = None
    #: the device its records show (name substring, kind, attributes): which references apply
    device: dict[str, Any] | None = None

    @property
    def gpu_gres(self) -> str | None:
        """What a GPU job asks for per node: ``gres``, else ``gpu:<gpus_per_node>``."""
        if self.gres:
            return self.gres
        return f"gpu:{self.gpus_per_node}" if self.gpus_per_node else None

    def cpus_per_task(self, ranks_per_node: int) -> int | None:
        """A rank's share of a node's CPUs (``--cpus-per-task``), None where the partition
        does not say how many it has. One rank per node (a 1-rank task, 2 ranks on 2 nodes)
        takes them all: Slurm's default is one CPU per task, which a task plugin (affinity,
        cgroup) binds the rank to. The suite's Slurm jobs and its ReFrame checks ask alike."""
        if not self.cpus_per_node:
            return None
        return max(1, self.cpus_per_node // max(1, ranks_per_node))


@dataclass(frozen=True)
class Site:
    name: str
    path: Path
    scheduler: str
    partitions: dict[str, Partition]
    partition: str
    launcher: str = "srun"
    backend: str | None = None
    image_dir: str | None = None
    data_dir: str | None = None
    python: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    modules: tuple[str, ...] = ()
    module_purge: bool = False
    env: dict[str, str] = field(default_factory=dict)
    sbatch_options: tuple[str, ...] = ()
    array_parallelism: int | None = None
    tasks_per_job: int = 1
    poll_interval_s: float = 10.0
    description: str = ""

    @property
    def default_partition(self) -> Partition:
        return self.partitions[self.partition]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path),
            "scheduler": self.scheduler,
            "partition": self.partition,
            "launcher": self.launcher,
            "backend": self.backend,
        }


def _a_directory(given: str) -> ConfigError:
    """`--site DIR`: what to give instead, with the profiles DIR holds."""
    inside = sorted(Path(given).glob("*.toml"))
    return ConfigError(
        f"--site {given}: a directory, not a site profile; give one profile: its name"
        + (
            f" (this directory holds {', '.join(q.name for q in inside)}: --site {inside[0].stem})"
            if inside
            else ""
        )
        + f", found in sites/ or in {SITES_ENV} (set it to another directory of profiles), "
        "or the path of its .toml file"
    )


def find(name_or_path: str) -> Path:
    """``--site NAME`` → ``<sites dir>/NAME.toml``; anything with a ``/`` or ending in ``.toml``
    is a path."""
    if "/" in name_or_path or name_or_path.endswith(".toml"):
        p = Path(name_or_path)
        if p.is_dir():
            raise _a_directory(name_or_path)
        if not p.is_file():
            raise ConfigError(
                f"--site {name_or_path}: no such file; give a site name (see sites/) or the path "
                "of a site profile (.toml)"
            )
        return p
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name_or_path):
        raise ConfigError(
            f"--site {name_or_path!r}: a site name holds only letters, digits, '.', '_' and '-'"
        )
    dirs = sites_dirs()
    for d in dirs:
        p = d / f"{name_or_path}.toml"
        if p.is_file():
            return p
    if Path(name_or_path).is_dir():  # `--site sites`: the directory, named without a slash
        raise _a_directory(name_or_path)
    known = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.toml")})
    raise ConfigError(
        f"--site {name_or_path}: no profile {name_or_path}.toml in "
        f"{', '.join(str(d) for d in dirs)}; known sites: {', '.join(known) or 'none'} "
        f"(or give a path, or set {SITES_ENV})"
    )


def load(name_or_path: str) -> Site:
    """Read, validate and check a site profile; every problem is one ConfigError."""
    path = find(name_or_path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"site {path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"site {path}: not UTF-8 text (byte {exc.start}: {exc.object[exc.start : exc.start + 1]!r}); "
            "a site profile is a TOML file: save it as UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"site {path}: TOML syntax error: {exc}; fix the file") from None
    return from_document(doc, path)


def from_document(doc: dict[str, Any], path: Path) -> Site:
    from suite.safety import check_document

    # every value but the free-text description reaches the batch script or a command line
    check_document({k: v for k, v in doc.items() if k != "description"}, f"site {path}")
    try:
        schemas.validate("site", doc)
    except SchemaError as exc:
        raise ConfigError(
            f"site {path}: {exc}; see schemas/site.schema.json and docs/guide/clusters.md for the "
            "allowed fields and values"
        ) from None
    parts = {
        name: Partition(name=name, **{k: v for k, v in spec.items()})
        for name, spec in doc["partitions"].items()
    }
    partition = doc.get("partition")
    if partition is None:
        if len(parts) != 1:
            raise ConfigError(
                f"site {path}: partition: not set and [partitions] lists {len(parts)}; set "
                f"partition = one of {', '.join(sorted(parts))}"
            )
        partition = next(iter(parts))
    if partition not in parts:
        raise ConfigError(
            f"site {path}: partition = {partition!r} is not in [partitions]; use one of: "
            f"{', '.join(sorted(parts))} (or add [partitions.{partition}])"
        )
    for p in parts.values():
        if p.max_time and p.default_time and parse_time(p.default_time) > parse_time(p.max_time):
            raise ConfigError(
                f"site {path}: partitions.{p.name}.default_time {p.default_time} is longer than "
                f"its max_time {p.max_time}; shorten it"
            )
        if p.gres and not p.gpus_per_node:
            raise ConfigError(
                f"site {path}: partitions.{p.name}.gres = {p.gres!r} but gpus_per_node is 0; "
                "set gpus_per_node (the GPUs a job's ranks may use on each node)"
            )
    image_dir = doc.get("image_dir")
    if image_dir and not image_dir.startswith(("/", "~")):
        raise ConfigError(
            f"site {path}: image_dir = {image_dir!r} is relative, and the job would read it "
            "relative to the run directory on the nodes (this machine, relative to where dlsuite "
            'runs); give an absolute path (or one under ~), e.g. image_dir = "/project/images"'
        )
    backend = doc.get("backend")
    if backend == "apptainer" and not image_dir:  # docker's images are each node's daemon's
        raise ConfigError(
            f"site {path}: backend = {backend!r} needs image_dir (where its SIFs are); add "
            'image_dir = "/path/to/images"'
        )
    return Site(
        name=doc.get("name", path.stem),
        path=path.resolve(),
        scheduler=doc["scheduler"],
        partitions=parts,
        partition=partition,
        launcher=doc.get("launcher", "srun"),
        backend=backend,
        image_dir=doc.get("image_dir"),
        data_dir=doc.get("data_dir"),
        python=doc.get("python"),
        account=doc.get("account"),
        qos=doc.get("qos"),
        reservation=doc.get("reservation"),
        modules=tuple(doc.get("modules", ())),
        module_purge=bool(doc.get("module_purge", False)),
        env=dict(doc.get("env", {})),
        sbatch_options=tuple(doc.get("sbatch_options", ())),
        array_parallelism=doc.get("array_parallelism"),
        tasks_per_job=int(doc.get("tasks_per_job", 1)),
        poll_interval_s=float(doc.get("poll_interval_s", 10.0)),
        description=doc.get("description", ""),
    )
