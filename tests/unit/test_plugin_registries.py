"""The registries are the only lists of plug-in names.

A launcher, backend or scheduler registered with one line is accepted everywhere a name is
taken (``--launcher``/``--backend``/``--scheduler``, ``DLSUITE_*``, the config file, a site
profile, the task documents, ``--help``) with no other edit, and what its class declares
reaches the checks; an unknown name is one line, exit 2, naming the registered ones.

The plug-ins are the examples of the ``ADDING_*.md`` guides, copied from the guides' text (so
the examples are tested as written), in a folder of their own with a ``sitecustomize.py``
holding the registration lines: every process the test starts (the CLI, and the workers and
ranks of the real run in tests/integration/test_plugin_run.py) registers them at start-up,
as the one line in the package's ``__init__.py`` does in the tree.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from suite.backends import BACKENDS
from suite.errors import ConfigError
from suite.launchers import LAUNCHERS
from suite.launchers.base import Launch
from suite.schedulers import SCHEDULERS
from tests.helpers import ROOT, cli

GUIDES = {
    "mpiexec_hydra": ROOT / "suite" / "launchers" / "ADDING_LAUNCHERS.md",
    "taskset_backend": ROOT / "suite" / "backends" / "ADDING_BACKENDS.md",
    "at_scheduler": ROOT / "suite" / "schedulers" / "ADDING_SCHEDULERS.md",
}
#: the registration lines, as the guides give them, with the module where the test put it
REGISTRATIONS = """
from suite.backends import BACKENDS
from suite.launchers import LAUNCHERS
from suite.schedulers import SCHEDULERS

LAUNCHERS.register("mpiexec", "mpiexec_hydra:MpiexecHydra")
LAUNCHERS.register("tagged", "extra_plugins:Tagged")
BACKENDS.register("taskset", "taskset_backend:TasksetBackend")
SCHEDULERS.register("at", "at_scheduler:AtScheduler")
SCHEDULERS.register("later", "extra_plugins:Later")
"""
#: two more, written here: a launcher that runs (the suite's spawn under another name) and a
#: scheduler with an option of another scheduler and a section of its own
EXTRA = """
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from suite.launchers.spawn import Spawn
from suite.schedulers.base import NoScheduler


class Tagged(Spawn):
    name = "tagged"


class Later(NoScheduler):
    name = "later"
    options = frozenset({"job_name"})

    @classmethod
    def record_section(cls, env: Mapping[str, str]) -> dict[str, Any] | None:
        job = env.get("LATER_JOB")
        return {"kind": "later", "job_id": job} if job else None
"""


def guide_example(path: Path) -> str:
    """The guide's example module: its first Python block that defines a class."""
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), re.S)
    return next(b for b in blocks if "\nclass " in b)


def write_plugins(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for module, guide in GUIDES.items():
        (folder / f"{module}.py").write_text(guide_example(guide))
    (folder / "extra_plugins.py").write_text(EXTRA)
    (folder / "sitecustomize.py").write_text(REGISTRATIONS)
    return folder


@pytest.fixture(scope="module")
def plugins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment that registers the example plug-ins in every process."""
    folder = write_plugins(tmp_path_factory.mktemp("plugins"))
    return {"PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)])}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return cli("run", "--quick", *args, env=env)


def one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("dlsuite: error:"), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


DIST = ("--level", "distributed", "--benchmark", "allreduce", "--world-size", "4", "--dry-run")


# -- launchers ------------------------------------------------------------------------------------
def test_the_guides_launcher_renders_its_command() -> None:
    spec = importlib.util.spec_from_loader("mpiexec_hydra", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(guide_example(GUIDES["mpiexec_hydra"]), module.__dict__)
    py = "/usr/bin/python3"
    launch = Launch(worker=[py, "-m", "suite.worker", "/run dir/tasks/t.json"], python=py,
                    world_size=4, nodes=2)  # fmt: skip
    launcher = module.MpiexecHydra()
    assert launcher.command(launch) == [
        "mpiexec", "-n", "4", "-ppn", "2", "-genvall", py, "-m", "suite.worker",
        "/run dir/tasks/t.json",
    ]  # fmt: skip
    assert launcher.environment(launch)["DLSUITE_RANKS_FROM"] == "mpiexec"


def test_an_extra_launcher_is_one_module_and_one_line(
    plugins: dict[str, str], tmp_path: Path
) -> None:
    # the flag, the environment, a config file: accepted, and the plan's tasks use it
    for args, env in (
        (["--launcher", "mpiexec"], {}),
        ([], {"DLSUITE_LAUNCHER": "mpiexec"}),
    ):
        proc = run(*DIST, *args, env={**plugins, **env})
        assert proc.returncode == 0, proc.stderr
        assert re.search(r"distributed-allreduce-pytorch-fp32-w4-\w+ ", proc.stdout), proc.stdout
    conf = tmp_path / "c.toml"
    conf.write_text('[run]\nlauncher = "mpiexec"\n')
    assert run(*DIST, "--config", str(conf), env=plugins).returncode == 0
    # --help lists it
    assert "mpiexec" in cli("run", "--help", env=plugins).stdout
    # the task documents carry it and validate; its class's declarations are read, in a rank
    # too (PMI_* win over the inherited RANK)
    code = """
import json
from suite import config, plan, schemas
from suite.launchers.base import rank_env
cfg = config.resolve({"quick": True, "level": ["distributed"], "benchmarks": ["allreduce"],
                      "launcher": "mpiexec", "world_size": 4}, env={})
docs = [t.document(run_id="r", record_path="/x", provenance={}) for t in plan.build(cfg)]
for doc in docs:
    schemas.validate("task", doc)
env = {"DLSUITE_RANKS_FROM": "mpiexec", "PMI_RANK": "3", "PMI_SIZE": "4", "RANK": "0",
       "WORLD_SIZE": "2"}
print(json.dumps([sorted({d["launcher"] for d in docs}), list(rank_env(env).__dict__.values())]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, **plugins}, timeout=120, cwd=ROOT)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [["mpiexec"], [3, 4, 3, "mpiexec"]]


def test_an_extra_launcher_in_a_site_profile(plugins: dict[str, str], tmp_path: Path) -> None:
    site = tmp_path / "s.toml"
    site.write_text('scheduler = "none"\nlauncher = "mpiexec"\n[partitions.p]\nnodes = 1\n')
    proc = run(*DIST, "--site", str(site), env=plugins)
    assert proc.returncode == 0, proc.stderr


def test_what_a_launcher_cannot_do_is_refused_by_its_declarations(
    plugins: dict[str, str],
) -> None:
    # mpiexec declares no multi_node: the launchers that do are named
    one_line_error(
        run(*DIST, "--launcher", "mpiexec", "--nodes", "2", env=plugins),
        "--nodes 2", "--launcher horovodrun or srun",
    )  # fmt: skip
    # single declares max_ranks = 1: the others are named, the extra ones among them
    line = one_line_error(run(*DIST, "--launcher", "single", env=plugins), "starts one rank")
    assert "mpiexec" in line and "tagged" in line and "spawn" in line


def test_the_built_in_launchers_declare_what_the_lists_said() -> None:
    # the lists of names these declarations replaced (config, container backends, base.py)
    def where(attr: str) -> set[str]:
        return {n for n in LAUNCHERS.names() if getattr(LAUNCHERS.load(n), attr)}

    assert where("multi_node") == {"srun", "horovodrun"}
    assert where("container_per_rank") == {"srun", "mpirun"}
    assert where("ranks_die_with_launcher") == {"torchrun", "spawn", "horovodrun"}
    assert {n for n in LAUNCHERS.names() if LAUNCHERS.load(n).max_ranks == 1} == {"single"}
    for name in LAUNCHERS.names():
        assert LAUNCHERS.load(name).name == name


# -- backends and schedulers ----------------------------------------------------------------------
def test_the_guides_backend_renders_its_command() -> None:
    spec = importlib.util.spec_from_loader("taskset_backend", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(guide_example(GUIDES["taskset_backend"]), module.__dict__)
    session = Path("/run dir/sessions/s1.json")
    assert module.TasksetBackend().command(session) == [
        "taskset", "--cpu-list", "0", sys.executable, "-m", "suite.worker", str(session),
    ]  # fmt: skip


def test_an_extra_backend_is_one_module_and_one_line(
    plugins: dict[str, str], tmp_path: Path
) -> None:
    proc = run("--benchmark", "gemm", "--backend", "taskset", "--dry-run", env=plugins)
    assert proc.returncode == 0, proc.stderr
    site = tmp_path / "s.toml"
    site.write_text('scheduler = "none"\nbackend = "taskset"\n[partitions.p]\nnodes = 1\n')
    proc = run("--benchmark", "gemm", "--site", str(site), "--dry-run", env=plugins)
    assert proc.returncode == 0, proc.stderr
    assert "taskset" in cli("run", "--help", env=plugins).stdout


def test_an_extra_scheduler_owns_its_options_and_section(plugins: dict[str, str]) -> None:
    # the guide's at(1) scheduler: accepted, and its dry run shows what it would submit
    proc = run("--benchmark", "gemm", "--scheduler", "at", "--dry-run", env=plugins)
    assert proc.returncode == 0, proc.stderr
    assert "at now + 1 hour <<< " in proc.stdout
    # an option of other schedulers: the ones that take it are named
    one_line_error(
        run("--benchmark", "gemm", "--job-name", "x", "--dry-run", env=plugins),
        "--job-name: only with --scheduler later or --scheduler slurm (and a --site)",
    )
    proc = run("--benchmark", "gemm", "--scheduler", "later", "--job-name", "x", "--dry-run",
               env=plugins)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # --scheduler none inside one of its jobs: the records get its section
    code = (
        "from suite.schedulers import environment_section as e; "
        "print(e({'LATER_JOB': '7'}), e({'SLURM_JOB_ID': '5'})['kind'], e({}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, **plugins}, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "{'kind': 'later', 'job_id': '7'} slurm None"


# -- unknown names --------------------------------------------------------------------------------
def _choices(registry: Any, special: tuple[str, ...]) -> list[str]:
    return [*special, *registry.names()]


@pytest.mark.parametrize(
    ("args", "env", "where", "names"),
    [
        (["--launcher", "mpiexec"], {}, "--launcher 'mpiexec'", _choices(LAUNCHERS, ("auto",))),
        ([], {"DLSUITE_LAUNCHER": "ssh"}, "DLSUITE_LAUNCHER 'ssh'", _choices(LAUNCHERS, ("auto",))),
        (["--backend", "podman"], {}, "--backend 'podman'", _choices(BACKENDS, ("auto",))),
        (["--scheduler", "pbs"], {}, "--scheduler 'pbs'", _choices(SCHEDULERS, ())),
    ],
)  # fmt: skip
def test_an_unknown_name_is_one_line_naming_the_registered_ones(
    args: list[str], env: dict[str, str], where: str, names: list[str]
) -> None:
    line = one_line_error(run("--benchmark", "gemm", *args, "--dry-run", env=env), where)
    assert line.endswith("use one of: " + ", ".join(names)), line


@pytest.mark.parametrize("key", ["launcher", "backend", "scheduler"])
def test_an_unknown_name_in_a_config_file_or_site_names_the_file(tmp_path: Path, key: str) -> None:
    conf = tmp_path / "my config.toml"
    conf.write_text(f'[run]\n{key} = "nope"\n')
    one_line_error(run("--config", str(conf), "--dry-run"), f"{conf}: run.{key} = 'nope'")
    site = tmp_path / "s.toml"
    fields = {"scheduler": "none", key: "nope"}
    site.write_text(
        "".join(f'{k} = "{v}"\n' for k, v in fields.items()) + "[partitions.p]\nnodes = 1\n"
    )
    one_line_error(
        run("--site", str(site), "--dry-run"), f"site {site}: {key} = 'nope'", f"--{key})"
    )


def test_an_adapter_may_not_take_the_agreement_references_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An adapter named ``onnxruntime`` (as a contributor's onnxruntime adapter was) would be
    paired with itself in every agreement matrix, whose reference has that name: selecting it
    is one line naming the reason and the fix; ``dlsuite list`` shows it unavailable."""
    from suite.adapters import ADAPTERS
    from suite.adapters.base import AGREEMENT_REFERENCE
    from suite.cli import main as cli_main
    from suite.levels.network import agreement

    assert agreement.REFERENCE == AGREEMENT_REFERENCE == "onnxruntime"
    ADAPTERS.names()  # entry points scanned before the registry is patched
    monkeypatch.setattr(ADAPTERS, "_targets", {**ADAPTERS._targets,
                        "onnxruntime": "suite.adapters.numpy.adapter:NumPyAdapter"})  # fmt: skip
    monkeypatch.setattr(ADAPTERS, "_loaded", dict(ADAPTERS._loaded))
    with pytest.raises(ConfigError, match=r"^framework name 'onnxruntime' \(suite\.adapters\.numpy"
                       r"\.adapter:NumPyAdapter\) is reserved: the agreement matrices compare "
                       r"every framework with onnxruntime's logits under that name, and an "
                       r"adapter of the name would be paired with itself; give the framework "
                       r"another name$"):  # fmt: skip
        ADAPTERS.load("onnxruntime")
    code = cli_main(["run", "--quick", "--framework", "onnxruntime", "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "is reserved" in err[0], err
    assert cli_main(["list"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the list wraps its reasons
    assert "onnxruntime not here (framework name 'onnxruntime'" in out
    assert "is reserved" in out


def test_the_list_says_which_levels_a_framework_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """`dlsuite list` showed horovod beside pytorch with nothing saying it runs only the
    distributed level; a first run of another level then met only skipped records."""
    from suite.cli import main as cli_main

    assert cli_main(["list"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the list wraps its lines
    for name in ("horovod", "horovod-tensorflow"):
        assert re.search(rf"{name} .*?; runs the distributed level only", out), out
    assert "pytorch" in out and out.count("level only") == 2
    assert cli_main(["list", "--json"]) == 0
    frameworks = json.loads(capsys.readouterr().out)["frameworks"]
    assert frameworks["horovod"]["levels"] == ["distributed"]
    assert frameworks["tensorflow"]["levels"] == ["operator", "network", "distributed", "training"]


def test_a_distribution_not_installed_is_said_not_printed_as_none(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An adapter whose ``distribution`` is not what pip installed (its records' version is
    null): ``dlsuite list`` said "available here None"; now it names the distribution."""
    from suite.adapters import ADAPTERS
    from suite.adapters.numpy.adapter import NumPyAdapter
    from suite.cli import main as cli_main

    class WrongDistribution(NumPyAdapter):
        name = "wrongdist"
        distribution = "dlsuite-no-such-distribution"

    ADAPTERS.names()  # entry points scanned before the registry is patched
    monkeypatch.setattr(ADAPTERS, "_targets", {**ADAPTERS._targets, "wrongdist": "x:y"})
    monkeypatch.setattr(ADAPTERS, "_loaded", {**ADAPTERS._loaded, "wrongdist": WrongDistribution})
    assert cli_main(["list"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the list wraps its reasons
    assert (
        "wrongdist available here unknown (distribution 'dlsuite-no-such-distribution' not installed;"
        in out
    )
    assert "None" not in out
    assert cli_main(["list", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)["frameworks"]["wrongdist"]
    assert info["version"] is None and "not installed" in info["version_unknown"]


def test_an_adapter_folder_that_registers_nothing_is_named_in_the_unknown_framework_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A package under suite/adapters/ without ``ADAPTERS`` (or a folder without
    ``__init__.py``) was skipped without a word: ``--framework`` said only "unknown"."""
    import suite.adapters
    from suite.adapters import ADAPTERS
    from suite.cli import main as cli_main

    (tmp_path / "noadaptersfw").mkdir()
    (tmp_path / "noadaptersfw" / "__init__.py").write_text('"""Forgot ADAPTERS."""\n')
    (tmp_path / "noinitfw").mkdir()
    (tmp_path / "noinitfw" / "adapter.py").write_text("")
    ADAPTERS.names()  # scanned before the path is patched: these two are not registered
    monkeypatch.setattr(suite.adapters, "__path__", [*suite.adapters.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "suite.adapters.noadaptersfw", raising=False)
    code = cli_main(["run", "--quick", "--framework", "noadaptersfw", "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "unknown framework 'noadaptersfw'; choose one of: " in err[0]
    assert (
        "suite/adapters/noadaptersfw/ has no ADAPTERS mapping (its __init__.py needs ADAPTERS = "
        '{"noadaptersfw": "suite.adapters.noadaptersfw.adapter:<Class>"})' in err[0]
    )
    assert "suite/adapters/noinitfw/ has no __init__.py" in err[0]
    sys.modules.pop("suite.adapters.noadaptersfw", None)
