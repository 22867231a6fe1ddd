"""One declaration per option (suite/settings.py): the flags, variables, config keys, checks,
schema and docs table generated from it, and every name users had before still working."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from suite import config, schemas
from suite.cli import build_parser
from suite.config import resolve
from suite.errors import ConfigError
from suite.provenance import SOURCE_ROOT
from suite.settings import COMMAND_FLAGS, OPTIONS, RunConfig, setting

#: every flag of `dlsuite run` and its setting, as of be88f8a (before the table): each must
#: keep its name and land in the same setting
FLAGS_BEFORE = {
    "--level": "level", "--framework": "frameworks", "--benchmark": "benchmarks",
    "--backend": "backend", "--device": "device", "--dtype": "dtypes", "--quick": "quick",
    "--network": "networks", "--model": "model", "--batch": "batch", "--sizes": "operator_sizes",
    "--compile": "compile", "--xla": "xla", "--world-size": "world_size", "--nodes": "nodes",
    "--launcher": "launcher", "--strategy": "strategies", "--dist-backend": "dist_backend",
    "--data": "data", "--format": "formats", "--images": "images", "--label-base": "label_base",
    "--data-dir": "data_dir", "--config": "config", "--out": "out", "--resume": "resume",
    "--timeout": "timeout", "--isolate": "isolate", "--retry-noisy": "retry_noisy",
    "--seed": "seed", "--telemetry-interval": "telemetry_interval_ms",
    "--telemetry": "telemetry", "--require-quiet": "require_quiet", "--dry-run": "dry_run",
    "--strict": "strict", "--envs-dir": "envs_dir", "--scheduler": "scheduler",
    "--site": "site", "--partition": "partition", "--tasks-per-job": "tasks_per_job",
    "--job-name": "job_name",
}  # fmt: skip
#: every DLSUITE_* variable of a setting, as of be88f8a
ENV_BEFORE = {
    "DLSUITE_LEVEL": "level", "DLSUITE_NETWORKS": "networks",
    "DLSUITE_STRATEGIES": "strategies", "DLSUITE_FRAMEWORKS": "frameworks",
    "DLSUITE_BENCHMARKS": "benchmarks", "DLSUITE_BACKEND": "backend",
    "DLSUITE_DEVICE": "device", "DLSUITE_DTYPES": "dtypes", "DLSUITE_OUT": "out",
    "DLSUITE_TIMEOUT": "timeout", "DLSUITE_QUICK": "quick", "DLSUITE_WORLD_SIZE": "world_size",
    "DLSUITE_LAUNCHER": "launcher", "DLSUITE_ENVS_DIR": "envs_dir", "DLSUITE_DATA": "data",
    "DLSUITE_FORMAT": "formats", "DLSUITE_SCHEDULER": "scheduler", "DLSUITE_SITE": "site",
    "DLSUITE_ISOLATE": "isolate", "DLSUITE_DATA_DIR": "data_dir",
}  # fmt: skip
#: every [run] key of the config file, as of be88f8a (and model_dims, added since)
KEYS_BEFORE = {
    "level", "frameworks", "benchmarks", "backend", "device", "dtypes", "quick", "out",
    "timeout", "seed", "telemetry_interval_ms", "telemetry", "require_quiet", "networks",
    "model", "model_dims", "operator_sizes", "batch", "compile", "world_size", "nodes", "launcher",
    "dist_backend", "strategies", "envs_dir", "data", "data_dir", "formats", "images",
    "label_base", "xla", "scheduler", "site", "partition", "tasks_per_job", "job_name",
    "isolate", "retry_noisy",
}  # fmt: skip


def test_the_schema_file_is_what_the_table_gives() -> None:
    committed = (SOURCE_ROOT / "schemas" / "config.schema.json").read_text(encoding="utf-8")
    assert committed == config.schema_text(), (
        "schemas/config.schema.json is not current: run `make schema` "
        "(python -m suite.config --write)"
    )
    assert config.main(["--check"]) == 0


def test_the_docs_table_is_what_the_table_gives() -> None:
    docs = (SOURCE_ROOT / "docs" / "guide" / "configuration.md").read_text(encoding="utf-8")
    assert docs == config.docs_text(docs), (
        "docs/guide/configuration.md's option table: `make schema`"
    )
    for o in (*OPTIONS, *COMMAND_FLAGS):
        assert f"`{o.flag}" in docs


def test_a_stale_file_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "config.schema.json"
    stale.write_text(config.schema_text().replace('"isolate"', '"isolation"'))
    docs = tmp_path / "configuration.md"
    docs.write_text(config.DOCS_PATH.read_text(encoding="utf-8"))
    monkeypatch.setattr(config, "SCHEMA_PATH", stale)
    monkeypatch.setattr(config, "DOCS_PATH", docs)
    assert config.main(["--check"]) == 1
    assert config.main(["--write"]) == 0 and config.main(["--check"]) == 0
    assert stale.read_text() == config.schema_text()


def test_every_flag_users_had_lands_in_its_setting() -> None:
    parser = build_parser()
    for flag, name in FLAGS_BEFORE.items():
        o = setting(name)
        assert o.flag == flag
        if o.kind == "bool":
            args = parser.parse_args(["run", flag])
            assert getattr(args, name) is True, flag
            continue
        sample = {"int": "1", "float": "2.5", "list[int]": "1,2"}.get(o.kind, "x")
        value = getattr(parser.parse_args(["run", flag, sample]), name)
        assert value is not None and str(sample).split(",")[0] in str(value), (flag, value)
    assert parser.parse_args(["run", "--no-quick"]).quick is False
    assert parser.parse_args(["run", "--no-telemetry"]).telemetry is False
    # nothing given: every setting None, so the lower layers decide
    args = parser.parse_args(["run"])
    assert all(getattr(args, o.name) is None for o in OPTIONS)
    assert (args.dry_run, args.strict, args.config) == (False, False, None)


def test_every_variable_and_config_key_users_had_is_declared() -> None:
    assert config.ENV == {name: var for var, name in ENV_BEFORE.items()}
    keys = set(schemas.schema("config")["properties"]["run"]["properties"])
    assert keys == KEYS_BEFORE == {o.name for o in OPTIONS if o.config}
    assert {o.name for o in OPTIONS} <= {f for f in RunConfig.__dataclass_fields__}


@pytest.mark.parametrize(
    ("text", "value"),
    [("session", "session"), ("task", "task")],
)
def test_isolate_in_every_layer(tmp_path: Path, text: str, value: str) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(f'[run]\nisolate = "{text}"\n')
    assert resolve({"isolate": text}, env={}).isolate == value
    assert resolve({}, env={"DLSUITE_ISOLATE": text}).isolate == value
    assert resolve({"config": str(conf)}, env={}).isolate == value


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        ("level", "network,operator", ["network", "operator"]),
        ("dtypes", "fp32, bf16", ["fp32", "bf16"]),
        ("quick", "yes", True),
        ("quick", "0", False),
        ("world_size", "4", 4),
        ("timeout", "12.5", 12.5),
        ("formats", "folder,tfrecord", ["folder", "tfrecord"]),
        ("strategies", "allreduce,ssp", ["allreduce", "ssp"]),
        ("data_dir", "/d", "/d"),
    ],
)
def test_a_variable_is_parsed_by_its_setting_s_kind(name: str, text: str, value: Any) -> None:
    o = setting(name)
    assert o.env is not None
    assert config.parse_env(o, o.env, text) == value


@pytest.mark.parametrize(
    ("cli", "env", "toml", "words"),
    [
        (
            {"isolate": "thread"},
            {},
            "",
            ["--isolate 'thread'", "session, task", "a process per task"],
        ),
        # a value from a variable is named by the variable, not a flag the user never typed
        ({}, {"DLSUITE_ISOLATE": "thread"}, "", ["DLSUITE_ISOLATE 'thread'", "session, task"]),
        ({}, {"DLSUITE_WORLD_SIZE": "0"}, "", ["DLSUITE_WORLD_SIZE 0", "from 1 to 65536"]),
        ({}, {"DLSUITE_DTYPES": "fp99"}, "", ["DLSUITE_DTYPES 'fp99'", "fp32, tf32"]),
        ({}, {}, '[run]\nisolate = "thread"\n', ["run.isolate", "c.toml"]),
        ({"world_size": 0}, {}, "", ["--world-size 0", "from 1 to 65536"]),
        ({}, {"DLSUITE_WORLD_SIZE": "two"}, "", ["DLSUITE_WORLD_SIZE", "an integer"]),
        ({}, {}, "[run]\nworld_size = 70000\n", ["run.world_size", "65536"]),
        ({"label_base": 2}, {}, "", ["--label-base 2", "0, 1"]),
        ({"retry_noisy": 11}, {}, "", ["--retry-noisy 11", "from 0 to 10"]),
        ({"telemetry_interval_ms": 0.5}, {}, "", ["--telemetry-interval 0.5", "1 to 60000"]),
        ({"images": 0}, {}, "", ["--images 0"]),
        ({"formats": ["zip"]}, {}, "", ["--format 'zip'", "folder, webdataset"]),
        ({"formats": []}, {}, "", ["--format: empty list", "folder"]),
        ({"strategies": ["nope"]}, {}, "", ["--strategy 'nope'", "allreduce"]),
        ({"dist_backend": "ucx"}, {}, "", ["--dist-backend 'ucx'", "gloo", "auto: NCCL on GPUs"]),
        ({"seed": -1}, {}, "", ["--seed -1", "32-bit"]),
        ({"nodes": 0}, {}, "", ["--nodes 0"]),
        ({"batch": [0]}, {}, "", ["--batch 0", "1048576"]),
        ({"timeout": float("inf")}, {}, "", ["--timeout inf", "finite"]),
        ({"launcher": "pdsh"}, {}, "", ["--launcher 'pdsh'", "spawn"]),
        ({}, {"DLSUITE_SCHEDULER": "pbs"}, "", ["DLSUITE_SCHEDULER 'pbs'", "slurm"]),
        ({"scheduler": "pbs"}, {"DLSUITE_SCHEDULER": "slurm"}, "", ["--scheduler 'pbs'"]),
    ],
)
def test_bad_values_name_the_field_and_the_fix(
    tmp_path: Path, cli: dict[str, Any], env: dict[str, str], toml: str, words: list[str]
) -> None:
    if toml:
        conf = tmp_path / "c.toml"
        conf.write_text(toml)
        cli = {**cli, "config": str(conf)}
    with pytest.raises(ConfigError) as info:
        resolve(cli, env=env)
    for word in words:
        assert word in str(info.value), str(info.value)
    assert info.value.exit_code == 2


def test_the_schema_says_what_the_checks_say() -> None:
    run = schemas.schema("config")["properties"]["run"]["properties"]
    assert run["isolate"]["enum"] == ["session", "task"]
    assert run["dtypes"]["items"]["enum"] == ["fp32", "tf32", "bf16", "fp16"]
    assert (run["seed"]["minimum"], run["seed"]["maximum"]) == (0, 2**32 - 1)
    assert run["timeout"]["exclusiveMinimum"] == 0
    assert run["level"]["oneOf"][0] == {"type": "string", "minLength": 1}
    assert "pattern" in run["backend"] and "pattern" in run["job_name"]
    # a plug-in's names stay out of the committed file (a registered one is checked later)
    assert "enum" not in run["scheduler"]


def test_other_subcommands_take_the_same_declaration() -> None:
    parser = build_parser()
    args = parser.parse_args(["envs", "--envs-dir", "/e", "list"])
    assert args.envs_dir == "/e"
    args = parser.parse_args(["data", "make", "--data-dir", "/d", "--site", "s", "--config", "c"])
    assert (args.data_dir, args.site, args.config) == ("/d", "s", "c")
    args = parser.parse_args(["data", "info", "p", "--label-base", "1", "--data-dir", "/d"])
    assert (args.label_base, args.data_dir) == (1, "/d")
    json.dumps(config.config_schema())  # the generated document is plain JSON


def test_help_names_the_variable_and_the_registered_plugins() -> None:
    from suite.cli.options import flag_help

    assert flag_help(setting("isolate")).endswith("[DLSUITE_ISOLATE]")
    assert "[" not in flag_help(setting("seed"))  # no variable
    assert "slurm" in flag_help(setting("scheduler")) and "{choices}" not in flag_help(
        setting("scheduler")
    )


@pytest.mark.parametrize(
    ("argv", "hint"),
    [(["run", "--levle", "network"], "; did you mean --level?"),
     (["data", "info", "x", "--scann"], "; did you mean --scan?"),
     (["project", "x", "--levle", "2"], ""),  # project takes no --level: no guess from run's
     (["run", "--zzz"], "")],
)  # fmt: skip
def test_a_misspelt_flag_is_answered_with_the_closest_of_its_command(
    argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from suite.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("dlsuite: error: unrecognized arguments: ")
    assert (hint in err) if hint else "did you mean" not in err, err
    # the help to see is the subcommand's
    assert err.rstrip().endswith(
        f"(see `dlsuite {' '.join(argv[: 2 if argv[0] == 'data' else 1])} --help`)"
    )


@pytest.mark.parametrize(
    ("argv", "start", "hint"),
    [(["history", "chek"], "unknown command: 'chek' (choose from 'list',", "; did you mean check?"),
     (["reprot", "x"], "unknown command: 'reprot' (choose from 'run',", "; did you mean report?"),
     (["data", "zzz"], "unknown command: 'zzz' (choose from 'make', 'info', 'evict')", "")],
)  # fmt: skip
def test_a_misspelt_command_is_answered_with_the_closest_one(
    argv: list[str], start: str, hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`history chek` said "argument history_command: invalid choice", the parser's own name
    for the subcommand, and no more: now "unknown command" and the closest one."""
    from suite.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"dlsuite: error: {start}"), err
    assert (hint in err) if hint else "did you mean" not in err, err
