"""Run settings with one precedence: CLI flags > DLSUITE_* environment > config file > site
profile > defaults.

Every setting is declared once, in :mod:`suite.settings` (:data:`~suite.settings.OPTIONS`);
this module generates from that table the environment layer (:func:`parse_env`), the checks
every layer's values pass (:func:`check_declared`), ``schemas/config.schema.json``
(:func:`config_schema`) and docs/guide/configuration.md's option table (:func:`options_table`):
``python -m suite.config --write`` writes the two files, ``--check`` says whether they are
current. The config file is TOML validated against that schema; every error names the field
and the fix and becomes exit code 2 in the CLI. The launcher, backend and scheduler a setting
names are checked against their registries (the only lists of those names), and the chosen
launcher and scheduler classes say what else they accept.
"""

from __future__ import annotations

import importlib
import json
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
from suite.measure import measure_schema
from suite.provenance import SOURCE_ROOT
from suite.registry import Registry
from suite.schedulers import SCHEDULERS
from suite.settings import COMMAND_FLAGS, NAME_PATTERN, OPTIONS, Option, RunConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: settings a site profile provides when no other layer sets them (precedence: CLI >
#: environment > config file > site profile > defaults)
SITE_KEYS = ("scheduler", "backend", "launcher")
#: the settings that name a plug-in (``plugin=True`` in their declaration): its registry, and
#: the values besides its names ("auto": the suite chooses, per framework)
PLUGINS: dict[str, tuple[Registry[Any], tuple[str, ...]]] = {
    "launcher": (LAUNCHERS, ("auto",)),
    "backend": (BACKENDS, ("auto",)),
    "scheduler": (SCHEDULERS, ()),
}
#: the settings by name, and each one's environment variable (both from the one table,
#: :data:`suite.settings.OPTIONS`)
SETTINGS: dict[str, Option] = {o.name: o for o in OPTIONS}
ENV = {o.name: o.env for o in OPTIONS if o.env}


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


def choices(opt: Option) -> tuple[Any, ...] | None:
    """The values ``opt`` takes (a ``"module:NAME"`` declaration read from its module)."""
    if not isinstance(opt.choices, str):
        return opt.choices
    module, _, name = opt.choices.partition(":")
    return tuple(getattr(importlib.import_module(module), name))


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
            f"{path}: TOML syntax error: {exc}; fix the file (see docs/guide/configuration.md)"
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


#: what a DLSUITE_* variable of each kind of setting holds, for its message
ENV_EXPECTED = {
    "int": "an integer",
    "float": "a number",
    "bool": "1 or 0 (also true/false, yes/no)",
    "list[int]": "comma-separated integers",
}
BOOL_WORDS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def parse_env(opt: Option, var: str, text: str) -> Any:
    """The value of ``var`` (the variable of ``opt``) as its kind; a value that cannot be
    parsed is one ConfigError naming the variable and what it takes."""
    try:
        if opt.kind == "bool":
            return BOOL_WORDS[text.lower()]
        if opt.is_list:
            items = split_list(text)
            return [int(v) for v in items] if opt.item_kind == "int" else items
        if opt.kind == "int":
            return int(text)
        if opt.kind == "float":
            return float(text)
        return text
    except (KeyError, ValueError):
        raise ConfigError(f"{var}={text!r}: expected {ENV_EXPECTED[opt.kind]}") from None


def _from_env(env: dict[str, str]) -> dict[str, Any]:
    """The settings given by a ``DLSUITE_*`` variable (an empty one counts as unset)."""
    return {
        o.name: parse_env(o, o.env, env[o.env])
        for o in OPTIONS
        if o.env is not None and env.get(o.env, "") != ""
    }


def resolve(cli: dict[str, Any], env: dict[str, str] | None = None) -> RunConfig:
    """Merge the layers; ``cli`` holds only the flags the user actually gave (None = not given)."""
    cfg = RunConfig()
    file_doc: dict[str, Any] = {}
    if cli.get("config"):
        file_doc = load_file(cli["config"])
        cfg.config_file = str(cli["config"])
    run_section = dict(file_doc.get("run", {}))
    for o in OPTIONS:
        if o.one_or_list and isinstance(run_section.get(o.name), str):
            run_section[o.name] = [run_section[o.name]]
    layers = [
        run_section,
        _from_env(dict(os.environ if env is None else env)),
        {k: v for k, v in cli.items() if v is not None and k != "config"},
    ]
    for i, layer in enumerate(layers):
        for key, value in layer.items():
            if key in SETTINGS:
                setattr(cfg, key, value)
                o = SETTINGS[key]
                said = [f"{cli.get('config')}: [run] {key} =", o.env, o.flag]
                cfg.origin[key] = said[i] or key
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
    _check_label_base(cfg)
    _check_format_readers(cfg)
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
    if cfg.data is not None and _standing_data_unread(cfg):
        cfg.data = None
    if cfg.data is not None:
        from suite.levels.training.dataset import inspect_user_data

        _check_data_levels(cfg)
        cfg.data = str(Path(cfg.data).expanduser().resolve())  # no "..", links followed
        # missing, empty, mixed, an index that does not match its shards, a format no
        # registered adapter reads: one line naming the path and the fix
        found = inspect_user_data(cfg.data, cfg.data_dir, cfg.label_base)
        cfg.data_found = found.to_dict()
        _check_data_readers(cfg, found.layout, found.formats)


def _check_label_base(cfg: RunConfig) -> None:
    """``--label-base 1`` sets where a packed dataset's stored labels count from; a dataset
    whose labels the suite assigns from 0 (an ImageFolder's sorted class folders, the suite's
    own datasets) cannot count from 1, and the run would ignore the flag without a word."""
    if cfg.label_base != 1 or not {"training", "all"} & set(cfg.level):
        return
    said = f"{cfg.origin.get('label_base') or '--label-base'} 1"
    sized = any(p.get("data") for k, v in cfg.sizes.items() if k.startswith("training.")
                for p in v if isinstance(p, dict))  # fmt: skip
    if cfg.data is None and not sized:
        raise ConfigError(
            f"{said}: the suite's own datasets count their labels from 0; --label-base is for "
            "a packed dataset of yours (--data: TFRecord, RecordIO, WebDataset): drop it, or "
            "give --data"
        )
    layout = (cfg.data_found or {}).get("layout")
    if layout in ("imagefolder", "suite"):
        what = ("an ImageFolder, whose labels are its sorted class folders' positions"
                if layout == "imagefolder" else "a suite dataset, whose labels")  # fmt: skip
        raise ConfigError(
            f"{said}: --data {cfg.data} is {what} from 0; --label-base is for packed "
            "datasets whose stored labels may count from 1 (TFRecord, RecordIO, WebDataset): "
            "drop it"
        )


def _standing_data_unread(cfg: RunConfig) -> bool:
    """``DLSUITE_DATA`` is a standing setting: a run of levels that read no dataset leaves it
    unread with a plan note (``--data`` typed for such a run is an error, below)."""
    if cfg.origin.get("data") != SETTINGS["data"].env or {"training", "all"} & set(cfg.level):
        return False
    cfg.plan_notes.append(
        f"{SETTINGS['data'].env}={cfg.data} is not read: --level {','.join(cfg.level)} reads "
        "no dataset (the training level does)"
    )
    return True


def _check_data_levels(cfg: RunConfig) -> None:
    """``--data`` with no chosen level that reads a dataset (``--level operator``): the run
    would ignore it and exit 0, so it is one line before the dataset is even listed."""
    if {"training", "all"} & set(cfg.level):
        return
    said = cfg.origin.get("data") or "--data"
    named = ",".join(cfg.level)
    level = f"{cfg.origin['level']} {named}" if cfg.origin.get("level") else (
        f"the default level, {named},")  # fmt: skip
    raise ConfigError(
        f"{said} {cfg.data}: {level} reads no dataset (the training level's loader and feed "
        "benchmarks do): run --level training, or drop --data"
    )


def _check_data_readers(cfg: RunConfig, layout: str, formats: list[str]) -> None:
    """``--data`` that none of the run's frameworks reads: every training task would be a skip
    and the run would end "0 ok" with exit 0, so it is one line up front naming who reads it."""
    from suite.levels.training.dataset import readers_of

    readers = {f: readers_of(f) for f in formats}
    if not {"training", "all"} & set(cfg.level) or any(
        fw in r for r in readers.values() for fw in cfg.frameworks
    ):
        return
    said = cfg.origin.get("frameworks")
    named = ",".join(cfg.frameworks)
    who = ", ".join(f"{', '.join(r)} ({f})" for f, r in readers.items() if r)
    first = sorted({n for r in readers.values() for n in r}, key=lambda n: n != "pytorch")[0]
    yours = f"{said} {named}" if said else f"the default framework, {named},"
    verb = "read" if len(cfg.frameworks) > 1 else "reads"
    raise ConfigError(
        f"--data {cfg.data} ({layout}): read by {who}; {yours} {verb} none of it: run with "
        f"--framework {named + ',' + first if said else first}, or convert the dataset to a "
        "format yours reads (`dlsuite data info` lists who reads what)"
    )


def _check_format_readers(cfg: RunConfig) -> None:
    """``--format`` (the suite's datasets) that none of the run's frameworks reads: every
    loader and feed task would be a skip and the run "0 ok", exit 0; one line instead, as for
    ``--data`` (:func:`_check_data_readers`)."""
    from suite.adapters.data_words import DATA_FORMATS
    from suite.levels.training.dataset import readers_of

    if not cfg.formats or cfg.data is not None or not {"training", "all"} & set(cfg.level):
        return
    readers = {f: readers_of(f) for f in cfg.formats}
    if any(fw in r for r in readers.values() for fw in cfg.frameworks):
        return
    said = cfg.origin.get("frameworks")
    named = ",".join(cfg.frameworks)
    who = "; ".join(f"{f} is read by {', '.join(r) or 'no registered adapter'}"
                    for f, r in readers.items())  # fmt: skip
    theirs = sorted({f for f in DATA_FORMATS if any(fw in readers_of(f) for fw in cfg.frameworks)})
    yours = f"{said} {named}" if said else f"the default framework, {named},"
    verb = "read" if len(cfg.frameworks) > 1 else "reads"
    raise ConfigError(
        f"{cfg.origin.get('formats') or '--format'} {','.join(cfg.formats)}: {who}; "
        f"{yours} {verb} none of them: choose a format it reads "
        f"({', '.join(theirs) or 'none'}) or add a framework that reads yours"
    )


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


def check_text_fields(cfg: RunConfig) -> None:
    """No control character in any setting that reaches a file name, a command line or a
    script (every text setting; checked before the site profile or anything else reads
    them)."""
    from suite.safety import check_text

    if cfg.config_file is not None:
        check_text(cfg.config_file, "--config")
    for o in OPTIONS:
        value = getattr(cfg, o.name)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                check_text(item, o.flag or o.name)


def number(value: float) -> str:
    """A bound as people write it: 65536, not 65536.0 or 6.5536e+04."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e18 else f"{value:g}"


def bounds(o: Option) -> str:
    """What a number of ``o`` must be, for its message: "an integer from 1 to 65536"."""
    what = "an integer" if o.item_kind == "int" else "a finite number"
    if o.positive:
        what = f"a positive{',' if o.item_kind != 'int' else ''} {what[2:]}"
    if o.minimum is not None and o.maximum is not None:
        what += f" from {number(o.minimum)} to {number(o.maximum)}"
    elif o.minimum is not None:
        what += f" of at least {number(o.minimum)}"
    elif o.maximum is not None:
        what += f" of at most {number(o.maximum)}"
    return what + (f" ({o.bounds_why})" if o.bounds_why else "")


def check_declared(cfg: RunConfig) -> None:
    """What each setting's declaration says it takes, whichever layer gave it: a list holds
    at least one item, a value one of its choices, a number its bounds (one ConfigError
    naming what the user wrote, the flag, the variable or the config key, and the fix)."""
    for o in OPTIONS:
        value = getattr(cfg, o.name)
        if value is None or o.kind == "bool":
            continue
        allowed = choices(o)
        said = cfg.origin.get(o.name) or o.flag or o.name
        if o.is_list and not value:
            some = f" of: {', '.join(map(str, allowed))}" if allowed else ""
            raise ConfigError(f"{said}: empty list; give at least one{some}")
        for item in value if o.is_list else [value]:
            if allowed is not None and item not in allowed:
                one = "one or more" if o.is_list else "one"
                raise ConfigError(
                    f"{said} {item!r}: use {one} of: {', '.join(map(str, allowed))}"
                    + (" (comma-separated)" if o.is_list else "")
                    + (f" ({o.choices_why})" if o.choices_why else "")
                )
            if o.item_kind not in ("int", "float"):
                continue
            low_ok = (o.minimum is None or item >= o.minimum) and (not o.positive or item > 0)
            high_ok = o.maximum is None or item <= o.maximum
            if not (math.isfinite(item) and low_ok and high_ok):
                shown = f"{item:g}" if isinstance(item, float) else str(item)
                raise ConfigError(f"{said} {shown}: must be {bounds(o)}")


def check_measure(measure: dict[str, Any], where: str | None) -> None:
    """What the schema's bounds per key cannot see: ``min_samples`` above ``max_samples`` (the
    measurement stopped at the cap, its CI target never checked, and said nothing)."""
    from suite.measure import MeasureConfig

    lo = measure.get("min_samples", MeasureConfig.min_samples)
    hi = measure.get("max_samples", MeasureConfig.max_samples)
    if lo > hi:
        raise ConfigError(
            f"{where or 'the config'}: [measure] min_samples = {lo} is above max_samples = {hi}: "
            "the measurement would stop at max_samples before the CI target is ever checked; "
            "give min_samples at most max_samples"
        )


def check(cfg: RunConfig) -> None:
    check_text_fields(cfg)
    for key in PLUGINS:
        check_plugin(key, getattr(cfg, key), cfg.origin.get(key) or SETTINGS[key].flag or key)
    check_declared(cfg)
    if cfg.model is not None and not {"network", "distributed", "all"} & set(cfg.level):
        raise ConfigError(
            f"--model: a user's model runs in the network level's train and infer and the "
            f"distributed level's data_parallel (add --level network or --level distributed); "
            f"the {', '.join(cfg.level)} level would ignore it and run its own networks"
        )
    levels = set(cfg.level)
    for key, level, what in (
        ("xla", "operator", "compiles the operator level's operators with XLA (TensorFlow's "
         "networks compile with XLA under --compile)"),
        ("compile", "network", "compiles the network level's train and infer networks"),
    ):  # fmt: skip
        if getattr(cfg, key) and not {level, "all"} & levels:
            name = cfg.origin.get(key) or SETTINGS[key].flag or key
            raise ConfigError(
                f"{name}: {what}; the {', '.join(cfg.level)} level would run without it "
                f"(add --level {level}, or drop {name})"
            )
    if cfg.model is not None:
        from suite.onnx import zoo

        # one clear error for a missing or broken file, a dimension left dynamic, an input
        # dlsuite cannot bind
        zoo.fix_user_inputs(
            zoo.load_user_model(cfg.model), zoo.parse_dims(cfg.model_dims), batch=None
        )
    elif cfg.model_dims is not None and not (cfg.operator_sizes or "").lower().endswith(".onnx"):
        raise ConfigError(
            "--model-dims: sizes the dimensions of a model of yours; give --model FILE.onnx "
            "or --sizes from:FILE.onnx"
        )
    if cfg.operator_sizes is not None:
        from suite.levels.operator.from_network import networks

        # an unknown network, a bad file, a dimension left dynamic, an input it cannot bind
        networks(cfg.operator_sizes, cfg.size_set, cfg.batch, cfg.model_dims)
    if cfg.world_size % cfg.nodes:
        raise ConfigError(
            f"--nodes {cfg.nodes}: must be positive and divide --world-size {cfg.world_size}"
        )
    check_measure(cfg.measure, cfg.config_file)
    check_launcher(cfg)
    SCHEDULERS.load(cfg.scheduler).check_options(cfg)  # its own options (and the site)


def check_launcher(cfg: RunConfig) -> None:
    """``--launcher`` (a registered launcher or auto, checked before): one that can start the
    run's ranks on its nodes, as its class declares (``max_ranks``, ``multi_node``)."""
    if not cfg.starts_ranks:
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
    if launcher is not None and cfg.scheduler == "none" and not os.environ.get("SLURM_JOB_ID"):
        problem = launcher.outside_allocation(cfg.nodes)
        if problem:  # else every task's ranks fail ("srun: fatal: ..."), exit 1, at run time
            raise ConfigError(
                f"--launcher {cfg.launcher}: {problem}, and there is none here (SLURM_JOB_ID "
                "is unset): run dlsuite inside salloc or sbatch, let Slurm run it (--scheduler "
                "slurm --site NAME), or use --launcher auto"
            )
    if cfg.nodes > 1 and (launcher is None or not launcher.multi_node):
        # one that starts every rank here would rendezvous at 127.0.0.1 on each node
        multi = LAUNCHERS.names_where(lambda c: c.multi_node)
        if cfg.scheduler != "none":  # the run goes to Slurm already: the launcher is the fault
            raise ConfigError(
                f"--nodes {cfg.nodes}: --launcher {cfg.launcher} starts every rank on one node; "
                f"use --launcher {' or '.join(multi)} (ranks on each node of the job), or --nodes 1"
            )
        raise ConfigError(
            f"--nodes {cfg.nodes}: runs over several nodes go through Slurm in this version; "
            f"use --launcher {' or '.join(multi)} inside an allocation, or --nodes 1"
        )


# -- what the table generates: the config file's schema and the docs' option table ------------

SCHEMA_PATH = SOURCE_ROOT / "schemas" / "config.schema.json"
DOCS_PATH = SOURCE_ROOT / "docs" / "guide" / "configuration.md"
DOCS_BEGIN = (
    "<!-- the options table: generated from suite/settings.py by "
    "`python -m suite.config --write` (make schema); edit it there -->"
)
DOCS_END = "<!-- end of the generated options table -->"
#: the config file's sections besides [run] (they have no flag and no variable)
MEASURE_SCHEMA: dict[str, Any] = measure_schema()
#: an example of each level's per-benchmark sizes, for its section's description
SIZES_EXAMPLES = {
    "operator": "[operator.gemm] sizes = [{m = 512, n = 512, k = 512}]",
    "network": '[network.train] sizes = [{network = "resnet50", batch = 8, resolution = 64}]',
    "distributed": "[distributed.allreduce] sizes = [{sizes = [1024, 1048576]}]",
    "training": '[training.optimizer] sizes = [{optimizer = "adamw", params = '
    '"zoo:resnet50:full", hyper = {lr = 0.001, weight_decay = 0.05}}], [training.loader] '
    'sizes = [{format = "folder", workers = 4, batch = 256, cache = "cold"}]',
}


def schema_description(o: Option) -> str:
    """The help of ``o`` as the schema says it (a plug-in's names stay out of the file: a
    registered plug-in is checked when the settings are resolved)."""
    return o.help.replace("{choices}", f"a registered {o.name} (suite/{o.name}s/__init__.py)")


def _value_schema(o: Option, kind: str) -> dict[str, Any]:
    allowed = choices(o)
    if allowed is not None:
        return {"enum": list(allowed)}
    if kind == "str":
        return {"type": "string", "pattern": o.pattern} if o.pattern else {
            "type": "string", "minLength": 1
        }  # fmt: skip
    if kind == "bool":
        return {"type": "boolean"}
    doc: dict[str, Any] = {"type": "integer" if kind == "int" else "number"}
    if o.minimum is not None:
        doc["minimum"] = o.minimum
    if o.positive:
        doc["exclusiveMinimum"] = 0
    if o.maximum is not None:
        doc["maximum"] = o.maximum
    return doc


def option_schema(o: Option) -> dict[str, Any]:
    """The config file's ``[run]`` key of ``o``, as JSON Schema."""
    if o.plugin:
        doc: dict[str, Any] = {"type": "string", "pattern": NAME_PATTERN}
    elif o.is_list:
        doc = {"type": "array", "items": _value_schema(o, o.item_kind), "minItems": 1}
        if o.one_or_list:
            doc = {"oneOf": [_value_schema(o, o.item_kind), doc]}
    else:
        doc = _value_schema(o, o.kind)
    return {**doc, "description": schema_description(o)}


def config_schema() -> dict[str, Any]:
    """``schemas/config.schema.json``: the ``[run]`` keys from the settings' table, then the
    sections only the file has."""
    sizes = {
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"sizes": {"type": "array", "items": {"type": "object"}, "minItems": 1}},
        },
    }
    peak = {"type": "number", "exclusiveMinimum": 0}
    from suite.dtypes import DTYPES

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://dlsuite.dev/schemas/config.schema.json",
        "title": "dlsuite config file (TOML)",
        "description": "Precedence: command-line flags > DLSUITE_* environment variables > "
        "this file > site profile > defaults. Generated from suite/settings.py by "
        "`python -m suite.config --write`: edit it there.",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "run": {
                "type": "object",
                "additionalProperties": False,
                "properties": {o.name: option_schema(o) for o in OPTIONS if o.config},
            },
            "measure": MEASURE_SCHEMA,
            "device": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "peak_tflops": {
                        "description": "Override the declared/estimated peak per dtype "
                        "(TFLOP/s), e.g. from a site's own measurement.",
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {d: peak for d in DTYPES},
                    }
                },
            },
            **{
                level: {
                    "description": f"Per-benchmark custom sizes: {SIZES_EXAMPLES[level]}",
                    **sizes,
                }
                for level in LEVELS
            },
        },
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _default_text(o: Option) -> str:
    if o.doc_default is not None:
        return o.doc_default
    if o.default is None:
        return "none"
    if o.kind == "bool":
        return "on" if o.default else "off"
    if o.is_list:
        return f"`{','.join(map(str, o.default))}`"
    return f"`{o.default:g}`" if isinstance(o.default, float) else f"`{o.default}`"


def options_table() -> str:
    """docs/guide/configuration.md's table of ``dlsuite run``'s options: flag, variable, [run] key,
    default, meaning, one row per option of :data:`OPTIONS` and :data:`COMMAND_FLAGS`."""
    rows = [
        "| flag | environment | `[run]` key | default | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for o in (*OPTIONS, *COMMAND_FLAGS):
        if o.kind == "bool":
            flag = f"`{o.flag}` / `--no-{str(o.flag)[2:]}`" if o.negatable else f"`{o.flag}`"
        else:
            flag = f"`{o.flag} {o.metavar}`"
        env = f"`{o.env}`" if o.env else "–"
        if o.env and o.kind == "bool":
            env += " (`1`/`0`, `true`/`false`, `yes`/`no`)"
        key = f"`{o.name}`" if o.config else "–"
        if o.config and o.one_or_list:
            key += " (string or list)"
        elif o.config and o.kind == "list[int]":
            key += " (array of integers)"
        cells = (flag, env, key, _default_text(o), o.doc or schema_description(o))
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows)


def schema_text() -> str:
    return json.dumps(config_schema(), indent=2, ensure_ascii=False) + "\n"


def docs_text(current: str) -> str:
    """``current`` (docs/guide/configuration.md) with its generated table replaced by today's."""
    head, begin, rest = current.partition(DOCS_BEGIN)
    _, end, tail = rest.partition(DOCS_END)
    if not begin or not end:
        raise ConfigError(f"{DOCS_PATH}: the markers of the generated table are missing")
    return f"{head}{DOCS_BEGIN}\n{options_table()}\n{DOCS_END}{tail}"


def main(argv: list[str] | None = None) -> int:
    """``python -m suite.config --write``: write the schema and the docs' table from the
    settings' table; ``--check``: exit 1 (naming the files) when either is not current."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m suite.config", description=main.__doc__)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write the generated files")
    mode.add_argument("--check", action="store_true", help="exit 1 when one is not current")
    args = p.parse_args(argv)
    docs = DOCS_PATH.read_text(encoding="utf-8")
    wanted = {SCHEMA_PATH: schema_text(), DOCS_PATH: docs_text(docs)}
    stale = [path for path, text in wanted.items() if path.read_text(encoding="utf-8") != text]
    if args.write:
        for path in stale:
            path.write_text(wanted[path], encoding="utf-8")
            print(f"wrote {path}")
        return 0
    for path in stale:
        print(f"{path} is not what suite/settings.py gives: run `python -m suite.config --write`")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
