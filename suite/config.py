"""Run settings with one precedence: CLI flags > DLSUITE_* environment > config file > defaults.

The config file is TOML validated against ``schemas/config.schema.json``; every error names the
field and the fix and becomes exit code 2 in the CLI. The settings themselves are
:class:`~suite.settings.RunConfig`; the launcher, backend and scheduler they name are checked
against their registries (the only lists of those names), and the chosen launcher and
scheduler classes say what else they accept.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

from suite import schemas
from suite.backends import BACKENDS
from suite.errors import ConfigError, SchemaError
from suite.launchers import LAUNCHERS
from suite.levels import LEVELS
from suite.registry import Registry
from suite.schedulers import SCHEDULERS
from suite.settings import RunConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DIST_BACKENDS = ("auto", "gloo", "nccl", "mpi")
DEVICES = ("auto", "cpu", "cuda")
ISOLATION_MODES = ("session", "task")
#: settings a site profile provides when no other layer sets them (precedence: CLI >
#: environment > config file > site profile > defaults)
SITE_KEYS = ("scheduler", "backend", "launcher")
#: the settings that name a plug-in: its registry, and the values besides its names ("auto":
#: the suite chooses, per framework)
PLUGINS: dict[str, tuple[Registry[Any], tuple[str, ...]]] = {
    "launcher": (LAUNCHERS, ("auto",)),
    "backend": (BACKENDS, ("auto",)),
    "scheduler": (SCHEDULERS, ()),
}


def plugin_choices(key: str) -> list[str]:
    """What the setting ``key`` (launcher, backend, scheduler) takes: its special values, then
    the registered names (reading no plug-in module)."""
    registry, special = PLUGINS[key]
    return [*special, *registry.names()]


def check_plugin(key: str, value: str, where: str, hint: str = "") -> None:
    """``value`` is a registered ``key`` (or a special value), else one ConfigError naming
    ``where`` it came from and every choice."""
    choices = plugin_choices(key)
    if value not in choices:
        raise ConfigError(
            f"{where} {value!r}: not a {key} in this version; use one of: {', '.join(choices)}"
            + hint
        )


ENV = {
    "level": "DLSUITE_LEVEL",
    "networks": "DLSUITE_NETWORKS",
    "strategies": "DLSUITE_STRATEGIES",
    "frameworks": "DLSUITE_FRAMEWORKS",
    "benchmarks": "DLSUITE_BENCHMARKS",
    "backend": "DLSUITE_BACKEND",
    "device": "DLSUITE_DEVICE",
    "dtypes": "DLSUITE_DTYPES",
    "out": "DLSUITE_OUT",
    "timeout": "DLSUITE_TIMEOUT",
    "quick": "DLSUITE_QUICK",
    "world_size": "DLSUITE_WORLD_SIZE",
    "launcher": "DLSUITE_LAUNCHER",
    "envs_dir": "DLSUITE_ENVS_DIR",
    "data": "DLSUITE_DATA",
    "formats": "DLSUITE_FORMAT",
    "scheduler": "DLSUITE_SCHEDULER",
    "site": "DLSUITE_SITE",
    "isolate": "DLSUITE_ISOLATE",
}
LIST_KEYS = ("level", "frameworks", "benchmarks", "dtypes", "networks", "strategies", "formats")


def split_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def load_file(path: str) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"--config {path}: cannot read it ({exc.strerror}); give the path of a TOML file"
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"--config {path}: not UTF-8 text (byte {exc.start}: "
            f"{exc.object[exc.start : exc.start + 1]!r}); a config is a TOML file: save it as UTF-8"
        ) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"{path}: TOML syntax error: {exc}; fix the file (see docs/configuration.md)"
        ) from None
    from suite.safety import check_document

    check_document(doc, path)
    for field_name, value in numbers(doc):
        if not math.isfinite(value):
            raise ConfigError(
                f"{path}: {field_name} = {value}: not a finite number; give a number (TOML's "
                "nan and inf are not accepted)"
            )
    try:
        schemas.validate("config", doc)
    except SchemaError as exc:
        raise ConfigError(
            f"{path}: {exc}; see schemas/config.schema.json for the allowed fields"
        ) from None
    for key in PLUGINS:
        value = doc.get("run", {}).get(key)
        if isinstance(value, str):
            check_plugin(key, value, f"{path}: run.{key} =")
    return doc


def numbers(doc: Any, path: str = "") -> list[tuple[str, float]]:
    """Every float in a parsed document, with its dotted path."""
    if isinstance(doc, float):
        return [(path, doc)]
    if isinstance(doc, dict):
        return [n for k, v in doc.items() for n in numbers(v, f"{path}.{k}" if path else k)]
    if isinstance(doc, list):
        return [n for i, v in enumerate(doc) for n in numbers(v, f"{path}[{i}]")]
    return []


def _from_env(env: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, var in ENV.items():
        if var not in env or env[var] == "":
            continue
        value: Any = env[var]
        if key in LIST_KEYS:
            value = split_list(value)
        elif key == "world_size":
            try:
                value = int(value)
            except ValueError:
                raise ConfigError(f"{var}={value!r}: expected a number of ranks") from None
        elif key == "timeout":
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{var}={value!r}: expected a number of seconds") from None
        elif key == "quick":
            if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ConfigError(f"{var}={value!r}: expected 1 or 0")
            value = value.lower() in ("1", "true", "yes")
        out[key] = value
    return out


def resolve(cli: dict[str, Any], env: dict[str, str] | None = None) -> RunConfig:
    """Merge the layers; ``cli`` holds only the flags the user actually gave (None = not given)."""
    cfg = RunConfig()
    file_doc: dict[str, Any] = {}
    if cli.get("config"):
        file_doc = load_file(cli["config"])
        cfg.config_file = str(cli["config"])
    run_section = dict(file_doc.get("run", {}))
    if isinstance(run_section.get("level"), str):
        run_section["level"] = [run_section["level"]]
    layers = [
        run_section,
        _from_env(dict(os.environ if env is None else env)),
        {k: v for k, v in cli.items() if v is not None and k != "config"},
    ]
    for layer in layers:
        for key, value in layer.items():
            if not hasattr(cfg, key):
                continue
            setattr(cfg, key, value)
    check_text_fields(cfg)
    cfg.world_size_given = any("world_size" in layer for layer in layers)
    if cfg.site:
        _apply_site(cfg, given={k for layer in layers for k in layer})
    _resolve_data_dir(cfg, cli, run_section, env)
    cfg.measure = dict(file_doc.get("measure", {}))
    cfg.peak_tflops = dict(file_doc.get("device", {}).get("peak_tflops", {}))
    cfg.sizes = {
        f"{level}.{name}": sec["sizes"]
        for level in LEVELS
        for name, sec in file_doc.get(level, {}).items()
        if "sizes" in sec
    }
    check(cfg)
    return cfg


def _resolve_data_dir(
    cfg: RunConfig, cli: dict[str, Any], run_section: dict[str, Any], env: dict[str, str] | None
) -> None:
    """The data dir by its own precedence (suite/datasets/location.py): --data-dir >
    DLSUITE_DATA_DIR > [run] data_dir > the site profile's data_dir > the default."""
    from suite.datasets.location import resolve_data_dir

    site_value = None
    if cfg.site:
        from suite import sites

        site_value = getattr(sites.load(cfg.site), "data_dir", None)
    where = resolve_data_dir(
        cli.get("data_dir"),
        config_value=run_section.get("data_dir"),
        site_value=site_value,
        env=dict(os.environ if env is None else env),
    )
    cfg.data_dir, cfg.data_dir_source = str(where.path), where.source
    if cfg.data is not None:
        from suite.levels.training.dataset import inspect_user_data

        cfg.data = str(Path(cfg.data).expanduser().absolute())
        # missing, empty, mixed, an index that does not match its shards, a format no
        # registered adapter reads: one line naming the path and the fix
        cfg.data_found = inspect_user_data(cfg.data, cfg.data_dir, cfg.label_base).to_dict()


def _apply_site(cfg: RunConfig, given: set[str]) -> None:
    """The site profile's scheduler, backend and launcher, where no other layer set them."""
    from suite import sites

    site = sites.load(cfg.site or "")
    values = {"scheduler": site.scheduler, "backend": site.backend, "launcher": site.launcher}
    for key in SITE_KEYS:
        value = values[key]
        if value is not None:
            check_plugin(key, value, f"site {site.path}: {key} =", f" (or give --{key})")
            if key not in given:
                setattr(cfg, key, value)


#: the most ranks, nodes and samples per batch this version plans (far beyond any machine
#: today; a bound so a typo such as 10**20 is one clear error, not an overflow deep inside)
MAX_WORLD_SIZE, MAX_BATCH, MAX_SEED = 65536, 1 << 20, (1 << 32) - 1
#: the most rounds of --retry-noisy (each re-measures every record still noisy)
MAX_NOISY_RETRIES = 10
#: the settings a user types that reach a file name, a command line or a script
TEXT_FIELDS = {
    "level": "--level", "frameworks": "--framework", "benchmarks": "--benchmark",
    "backend": "--backend", "device": "--device", "dtypes": "--dtype", "out": "--out",
    "networks": "--network", "model": "--model", "operator_sizes": "--sizes",
    "launcher": "--launcher",
    "dist_backend": "--dist-backend", "strategies": "--strategy", "envs_dir": "--envs-dir", "config_file": "--config",
    "data": "--data", "data_dir": "--data-dir", "formats": "--format",
    "scheduler": "--scheduler", "site": "--site", "partition": "--partition",
    "job_name": "--job-name", "isolate": "--isolate",
}  # fmt: skip


def check_text_fields(cfg: RunConfig) -> None:
    """No control character in any setting that reaches a file name, a command line or a
    script (checked before the site profile or anything else reads them)."""
    from suite.safety import check_text

    for attr, flag in TEXT_FIELDS.items():
        value = getattr(cfg, attr)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                check_text(item, flag)


def check(cfg: RunConfig) -> None:
    from suite.dtypes import DTYPES

    check_text_fields(cfg)

    check_plugin("backend", cfg.backend, "--backend")
    if cfg.device not in DEVICES:
        raise ConfigError(f"--device {cfg.device!r}: use one of: {', '.join(DEVICES)}")
    for d in cfg.dtypes:
        if d not in DTYPES:
            raise ConfigError(
                f"--dtype {d!r}: unknown dtype; use a comma-separated list of: {', '.join(DTYPES)}"
            )
    if not cfg.dtypes:
        raise ConfigError("--dtype: empty list; give at least one of: " + ", ".join(DTYPES))
    if not cfg.frameworks:
        raise ConfigError(
            "--framework: empty list; give at least one framework (see `dlsuite list`)"
        )
    for b in cfg.batch or []:
        if not 1 <= b <= MAX_BATCH:
            raise ConfigError(f"--batch {b}: batch sizes must be integers from 1 to {MAX_BATCH}")
    if cfg.model is not None:
        from suite.onnx import zoo

        zoo.load_user_model(cfg.model)  # one clear error for a missing/broken file
    if cfg.operator_sizes is not None:
        from suite.levels.operator.from_network import networks

        networks(cfg.operator_sizes, cfg.size_set, cfg.batch)  # an unknown network, a bad file
    if not 1 <= cfg.world_size <= MAX_WORLD_SIZE:
        raise ConfigError(
            f"--world-size {cfg.world_size}: must be a number of ranks from 1 to {MAX_WORLD_SIZE}"
        )
    if cfg.nodes < 1 or cfg.world_size % cfg.nodes:
        raise ConfigError(
            f"--nodes {cfg.nodes}: must be positive and divide --world-size {cfg.world_size}"
        )
    check_launcher(cfg)
    if cfg.dist_backend not in DIST_BACKENDS:
        raise ConfigError(
            f"--dist-backend {cfg.dist_backend!r}: use one of: {', '.join(DIST_BACKENDS)}"
        )
    if cfg.strategies is not None:
        from suite import strategies as S

        if not cfg.strategies:
            raise ConfigError(
                f"--strategy: empty list; give one or more of: {', '.join(S.STRATEGIES)}"
            )
        for name in cfg.strategies:
            S.get(name)  # unknown: one error listing the strategies
    if not 0 <= cfg.seed <= MAX_SEED:
        raise ConfigError(
            f"--seed {cfg.seed}: must be an integer from 0 to {MAX_SEED} (every framework's "
            "generator takes a 32-bit seed)"
        )
    if not 1 <= cfg.telemetry_interval_ms <= 60_000:
        raise ConfigError(
            f"--telemetry-interval {cfg.telemetry_interval_ms:g}: must be between 1 and 60000 ms"
        )
    check_plugin("scheduler", cfg.scheduler, "--scheduler")
    SCHEDULERS.load(cfg.scheduler).check_options(cfg)  # its own options (and the site)
    if cfg.isolate not in ISOLATION_MODES:
        raise ConfigError(
            f"--isolate {cfg.isolate!r}: use session (one worker process for a sequence of "
            "tasks, the default) or task (a process per task)"
        )
    if not 0 <= cfg.retry_noisy <= MAX_NOISY_RETRIES:
        raise ConfigError(
            f"--retry-noisy {cfg.retry_noisy}: must be an integer from 0 to {MAX_NOISY_RETRIES}"
        )
    if cfg.formats is not None:
        from suite.adapters.data_words import DATA_FORMATS

        for f in cfg.formats:
            if f not in DATA_FORMATS:
                raise ConfigError(f"--format {f!r}: use one or more of: {', '.join(DATA_FORMATS)}")
        if not cfg.formats:
            raise ConfigError(
                f"--format: empty list; give one or more of: {', '.join(DATA_FORMATS)}"
            )
    if cfg.images is not None and not 1 <= cfg.images <= 10_000_000:
        raise ConfigError(f"--images {cfg.images}: give a number of images from 1 to 10000000")
    if cfg.label_base is not None and cfg.label_base not in (0, 1):
        raise ConfigError(f"--label-base {cfg.label_base}: labels count from 0 or from 1")
    if cfg.timeout is not None and not (math.isfinite(cfg.timeout) and cfg.timeout > 0):
        raise ConfigError(f"--timeout {cfg.timeout}: must be a positive, finite number of seconds")


def check_launcher(cfg: RunConfig) -> None:
    """``--launcher``: a registered launcher (or auto), and one that can start the run's ranks
    on its nodes, as its class declares (``max_ranks``, ``multi_node``)."""
    check_plugin("launcher", cfg.launcher, "--launcher")
    if "distributed" not in cfg.level and "all" not in cfg.level:
        return  # the other levels run one rank on one node, whatever was asked
    launcher = None if cfg.launcher == "auto" else LAUNCHERS.load(cfg.launcher)
    if launcher is not None and launcher.max_ranks is not None:
        if cfg.world_size > launcher.max_ranks:
            others = LAUNCHERS.names_where(
                lambda c: c.max_ranks is None or c.max_ranks >= cfg.world_size
            )
            most = "one rank" if launcher.max_ranks == 1 else f"at most {launcher.max_ranks} ranks"
            raise ConfigError(
                f"--launcher {cfg.launcher} starts {most}; use auto or one of: "
                f"{', '.join(others)} for --world-size {cfg.world_size}"
            )
    if cfg.nodes > 1 and (launcher is None or not launcher.multi_node):
        # one that starts every rank here would rendezvous at 127.0.0.1 on each node
        multi = LAUNCHERS.names_where(lambda c: c.multi_node)
        raise ConfigError(
            f"--nodes {cfg.nodes}: runs over several nodes go through Slurm in this version; "
            f"use --launcher {' or '.join(multi)} inside an allocation, or --nodes 1"
        )
