"""The Slurm scheduler's text: batch scripts per variant, compared exactly; the srun command a
job's launcher renders; every user value whitelisted or quoted (injection attempts); tasks
grouped into array elements; records' scheduler section from SLURM_* variables.

The same paths run for real against the local cluster in tests/integration/test_slurm.py."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from suite import schemas
from suite.config import resolve
from suite.errors import ConfigError
from suite.launchers.base import Launch
from suite.launchers.srun import Srun
from suite.plan import Task, build
from suite.schedulers import SCHEDULERS, environment_section
from suite.schedulers.slurm import (
    SbatchSpec,
    SlurmScheduler,
    check_env,
    check_name,
    check_option,
    check_path,
    group_tasks,
    render_script,
    sbatch_command,
)
from suite.sites import format_time, from_document, parse_time
from tests.helpers import ROOT

PLAN = "/scratch/my runs/r1/slurm/s1/plan.json"


def spec(**kw: Any) -> SbatchSpec:
    base: dict[str, Any] = dict(
        job_name="dlsuite-r1",
        partition="debug",
        nodes=1,
        ntasks_per_node=2,
        time="00:20:00",
        output="/scratch/my runs/r1/slurm/s1/slurm-%A_%a.out",
        command=["/opt/py env/bin/python", "-m", "suite.schedulers.job", PLAN],
        workdir="/scratch/my runs/r1",
        elements=3,
    )
    base.update(kw)
    return SbatchSpec(**base)


# -- scripts, exactly ---------------------------------------------------------------------
def test_cpu_script_with_spaces_in_paths() -> None:
    assert render_script(spec(array_parallelism=1, pythonpath="/src/dl suite")) == (
        "#!/bin/bash\n"
        "#SBATCH --job-name=dlsuite-r1\n"
        "#SBATCH --partition=debug\n"
        "#SBATCH --time=00:20:00\n"
        "#SBATCH --nodes=1\n"
        "#SBATCH --ntasks-per-node=2\n"
        "#SBATCH --array=0-2%1\n"
        "#SBATCH '--output=/scratch/my runs/r1/slurm/s1/slurm-%A_%a.out'\n"
        "#SBATCH --open-mode=append\n"
        "set -eo pipefail\n"
        "export PYTHONPATH='/src/dl suite'${PYTHONPATH:+:\"$PYTHONPATH\"}\n"
        "cd '/scratch/my runs/r1'\n"
        "exec '/opt/py env/bin/python' -m suite.schedulers.job '/scratch/my runs/r1/slurm/s1/plan.json'\n"
    )


def test_gpu_script_with_account_qos_modules_env() -> None:
    text = render_script(
        spec(
            partition="a100",
            nodes=2,
            ntasks_per_node=4,
            elements=1,
            account="proj-ml",
            qos="normal",
            reservation="bench",
            cpus_per_task=16,
            gres="gpu:a100:4",
            mem="500G",
            constraint="a100&ib",
            options=("--exclusive", "--mail-type=END,FAIL"),
            modules=("gcc/12.2.0", "cuda/12.4"),
            module_purge=True,
            env={"NCCL_DEBUG": "WARN", "DLSUITE_IMAGE_DIR": "/images/dl suite"},
            comment="dlsuite: 1 task(s)",
        )
    )
    assert text == (
        "#!/bin/bash\n"
        "# dlsuite: 1 task(s)\n"
        "#SBATCH --job-name=dlsuite-r1\n"
        "#SBATCH --partition=a100\n"
        "#SBATCH --account=proj-ml\n"
        "#SBATCH --qos=normal\n"
        "#SBATCH --reservation=bench\n"
        "#SBATCH --time=00:20:00\n"
        "#SBATCH --nodes=2\n"
        "#SBATCH --ntasks-per-node=4\n"
        "#SBATCH --cpus-per-task=16\n"
        "#SBATCH --gres=gpu:a100:4\n"
        "#SBATCH --mem=500G\n"
        "#SBATCH '--constraint=a100&ib'\n"
        "#SBATCH --array=0-0\n"
        "#SBATCH '--output=/scratch/my runs/r1/slurm/s1/slurm-%A_%a.out'\n"
        "#SBATCH --open-mode=append\n"
        "#SBATCH --exclusive\n"
        "#SBATCH --mail-type=END,FAIL\n"
        "set -eo pipefail\n"
        "if ! command -v module >/dev/null 2>&1; then\n"
        "    for init in /etc/profile.d/lmod.sh /etc/profile.d/modules.sh "
        "/usr/share/lmod/lmod/init/bash /usr/share/modules/init/bash; do\n"
        '        if [ -r "$init" ]; then . "$init"; break; fi\n'
        "    done\n"
        "fi\n"
        "module purge\n"
        "module load gcc/12.2.0\n"
        "module load cuda/12.4\n"
        "export NCCL_DEBUG=WARN\n"
        "export DLSUITE_IMAGE_DIR='/images/dl suite'\n"
        "export SRUN_CPUS_PER_TASK=16\n"
        "cd '/scratch/my runs/r1'\n"
        "exec '/opt/py env/bin/python' -m suite.schedulers.job '/scratch/my runs/r1/slurm/s1/plan.json'\n"
    )


def test_the_script_is_valid_bash() -> None:
    text = render_script(spec(modules=("cuda/12.4",), env={"A": 'x\'y "z" $(id)'}))
    out = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert out.returncode == 0, out.stderr


def test_env_values_are_exported_verbatim() -> None:
    nasty = "x'; rm -rf / #\"$(reboot)`id`$HOME ${PATH}"
    text = render_script(spec(env={"NASTY": nasty}))
    line = next(ln for ln in text.splitlines() if ln.startswith("export NASTY="))
    # what bash makes of the line is the value, unexpanded
    out = subprocess.run(
        ["bash", "-c", line + '\nprintf %s "$NASTY"'], capture_output=True, text=True
    )
    assert out.stdout == nasty


def test_sbatch_command_is_an_argument_list() -> None:
    assert sbatch_command(Path("/a b/job.sbatch")) == ["sbatch", "--parsable", "/a b/job.sbatch"]


# -- injection attempts: refused with exit-2 errors -----------------------------------------
@pytest.mark.parametrize(
    "kw",
    [
        {"job_name": "x; rm -rf /"},
        {"job_name": "a\nb"},
        {"partition": "$(reboot)"},
        {"partition": "debug\n#SBATCH --uid=0"},
        {"account": "a b"},
        {"qos": "`id`"},
        {"gres": "gpu:4;id"},
        {"time": "1:00:00; id"},
        {"mem": "5G --uid=0"},
        {"modules": ("cuda/12.4; rm -rf /",)},
        {"env": {"X": "line1\nline2"}},
        {"env": {"BAD-NAME": "v"}},
        {"env": {"X; id": "v"}},
        {"options": ("--uid=0 --gid=0",)},
        {"options": ("--output=/elsewhere",)},
        {"options": ("-A proj",)},
        {"workdir": "/runs/a\nb"},
        {"workdir": "/runs/50%"},
        {"workdir": "/runs/back\\slash"},
        {"command": ["/py", "-m", "suite.schedulers.job", "/p\n/plan.json"]},
        # a final newline: Python's `$` matches before it, so anchored .match() let it through
        {"job_name": "job\n"},
        {"partition": "debug\n"},
        {"account": "proj\n"},
        {"qos": "normal\n"},
        {"reservation": "r\n"},
        {"gres": "gpu:4\n"},
        {"time": "01:00:00\n"},
        {"mem": "5G\n"},
        {"constraint": "a100\n"},
        {"modules": ("cuda/12.4\n",)},
        {"env": {"X\n": "v"}},
        {"env": {"X": "v\x1b[2J"}},
        {"env": {"X": "tab\there"}},
        {"options": ("--exclusive\n",)},
        {"output": "/runs/slurm-%A_%a.out\n"},
        {"workdir": "/runs/a\x00b"},
        {"comment": "one\ntwo"},
    ],
)
def test_injection_is_refused(kw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as err:
        render_script(spec(**kw))
    assert err.value.exit_code == 2
    assert "\n" not in str(err.value).strip("\n") or "newline" in str(err.value)


def test_checkers_name_the_field() -> None:
    with pytest.raises(ConfigError, match="--job-name 'x; rm -rf /'"):
        check_name("x; rm -rf /", "--job-name")
    with pytest.raises(ConfigError, match="--out"):
        check_path("/a\nb", "--out")
    with pytest.raises(ConfigError, match="control character"):
        check_env("X", "a\nb")
    with pytest.raises(ConfigError, match="set by the suite"):
        check_option("--array=0-99")
    assert check_path("/my runs/it's fine", "--out") == "/my runs/it's fine"


def test_quoted_values_survive_sbatchs_own_parser() -> None:
    # sbatch splits #SBATCH lines like a shell (quotes, backslash escapes, # comments); with
    # backslashes refused, shlex.split reads the lines the way sbatch does
    text = render_script(spec(output="/x y/#1 'q'/slurm-%A_%a.out", constraint="a&b|c"))
    for line in text.splitlines():
        if line.startswith("#SBATCH "):
            (arg,) = shlex.split(line[len("#SBATCH ") :])
            assert arg.startswith("--")
    assert "#SBATCH '--output=/x y/#1 '\"'\"'q'\"'\"'/slurm-%A_%a.out'" in text


# -- from a plan and a site -----------------------------------------------------------------
def write_site(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "site.toml"
    p.write_text(text)
    return p


GPU_SITE = """
scheduler = "slurm"
partition = "gpu"
account = "acc1"
modules = ["cuda/12.4"]
[env]
NCCL_DEBUG = "WARN"
[partitions.gpu]
nodes = 4
cpus_per_node = 32
gpus_per_node = 4
gres = "gpu:a100:4"
max_time = "02:00:00"
[partitions.cpu]
nodes = 8
cpus_per_node = 64
"""


def scheduler(
    tmp_path: Path, site: str = GPU_SITE, **cli: Any
) -> tuple[SlurmScheduler, list[Task]]:
    path = write_site(tmp_path, site)
    base = {"level": ["distributed"], "quick": True, "benchmarks": ["allreduce"],
            "scheduler": "slurm", "site": str(path), "out": str(tmp_path / "run dir")}  # fmt: skip
    base.update(cli)
    cfg = resolve(base, env={})
    return SlurmScheduler(cfg), build(cfg)


def test_site_defaults_reach_the_settings(tmp_path: Path) -> None:
    s, tasks = scheduler(tmp_path)
    assert s.cfg.launcher == "srun"  # the site's default launcher
    assert all(t.launcher == "srun" for t in tasks)


def test_gpu_run_on_two_nodes(tmp_path: Path) -> None:
    s, tasks = scheduler(tmp_path, world_size=8, nodes=2, device="cuda")
    run_dir = tmp_path / "run dir"
    sp = s.spec(group_tasks(tasks, 1), run_dir, run_dir / "slurm" / "s1")
    assert (sp.partition, sp.account, sp.nodes, sp.ntasks_per_node) == ("gpu", "acc1", 2, 4)
    assert (sp.gres, sp.cpus_per_task, sp.time) == ("gpu:a100:4", 8, "00:15:00")
    assert sp.modules == ("cuda/12.4",) and sp.env == {"NCCL_DEBUG": "WARN"}
    assert sp.command[1:3] == ["-m", "suite.schedulers.job"]
    text = render_script(sp)
    assert "#SBATCH --gres=gpu:a100:4\n" in text and "export SRUN_CPUS_PER_TASK=8\n" in text


def test_cpu_partition_asks_for_no_gpus(tmp_path: Path) -> None:
    s, tasks = scheduler(tmp_path, partition="cpu", device="cpu")
    sp = s.spec(group_tasks(tasks, 1), tmp_path, tmp_path / "s1")
    assert sp.gres is None and sp.partition == "cpu" and sp.cpus_per_task == 32


def test_time_is_capped_at_the_partitions_limit(tmp_path: Path) -> None:
    s, tasks = scheduler(
        tmp_path, timeout=3000.0, benchmarks=["allreduce", "allgather", "broadcast"]
    )
    # 3 tasks of 50 min in one element: 2.5 h + slack, capped at the partition's 2 h
    assert s.time_limit(group_tasks(tasks, 3)) == "02:00:00"
    assert s.time_limit(group_tasks(tasks, 1)) == "01:00:00"


@pytest.mark.parametrize(
    ("cli", "needle"),
    [
        ({"world_size": 16, "nodes": 2, "device": "cuda"}, "8 ranks per node but partition gpu has 4 GPUs"),
        ({"world_size": 10, "nodes": 5}, "partition gpu of site"),
        ({"partition": "cpu", "device": "cuda"}, "has no GPUs"),
    ],
)  # fmt: skip
def test_what_does_not_fit_the_partition(tmp_path: Path, cli: dict[str, Any], needle: str) -> None:
    s, tasks = scheduler(tmp_path, **cli)
    with pytest.raises(ConfigError, match=needle):
        s.spec(group_tasks(tasks, 1), tmp_path, tmp_path / "s1")


APPTAINER_SITE = """
scheduler = "slurm"
backend = "apptainer"
image_dir = "/project/sifs"
partition = "cpu"
[partitions.cpu]
nodes = 2
"""


def test_the_users_image_dir_variable_wins_over_the_sites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DLSUITE_IMAGE_DIR where dlsuite runs wins over the site's image_dir, as every DLSUITE_*
    variable wins over a site profile (docs/guide/clusters.md, "Precedence"); before, the
    script exported the site's, so the job looked for the SIFs where the user had said not
    to. Without the variable the site's image_dir is the job's."""
    monkeypatch.delenv("DLSUITE_IMAGE_DIR", raising=False)
    s, tasks = scheduler(tmp_path, site=APPTAINER_SITE)
    text = render_script(s.spec(group_tasks(tasks, 1), tmp_path, tmp_path / "s1"))
    assert "export DLSUITE_IMAGE_DIR=/project/sifs\n" in text
    mine = tmp_path / "my sifs"
    monkeypatch.setenv("DLSUITE_IMAGE_DIR", str(mine))
    text = render_script(s.spec(group_tasks(tasks, 1), tmp_path, tmp_path / "s1"))
    assert f"export DLSUITE_IMAGE_DIR='{mine}'\n" in text and "/project/sifs" not in text
    monkeypatch.setenv("DLSUITE_IMAGE_DIR", "~/sifs")  # as the shell left it, quoted: this home's
    text = render_script(s.spec(group_tasks(tasks, 1), tmp_path, tmp_path / "s1"))
    assert f"export DLSUITE_IMAGE_DIR={Path.home() / 'sifs'}\n" in text


def test_a_sif_missing_from_the_jobs_image_directory_stops_the_submission(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The job's apptainer tasks look for their SIFs in the job's image directory, which the
    nodes share with this machine: one missing here is one line naming the SIF, the
    directory, where that came from and the command that makes it, exit 2, nothing made or
    submitted. Before, the job was queued, waited, and failed every task of the framework."""
    from suite.cli import main

    sifs = tmp_path / "sifs"
    sifs.mkdir()
    (sifs / "jax.sif").write_bytes(b"a SIF")
    site = write_site(tmp_path, APPTAINER_SITE.replace("/project/sifs", str(sifs)))
    monkeypatch.delenv("DLSUITE_IMAGE_DIR", raising=False)
    out = tmp_path / "run"
    argv = ["run", "--site", str(site), "--level", "distributed", "--benchmark", "allreduce",
            "--framework", "pytorch,jax", "--quick", "--world-size", "2", "--nodes", "2",
            "--out", str(out), "--no-history"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"dlsuite: error: --backend apptainer: no pytorch.sif in {sifs} (the job's image "
        "directory: image_dir of site site); make it with `dlsuite images sif --framework "
        f"pytorch --dir {sifs}`, or set DLSUITE_IMAGE_DIR (or the site's image_dir) to where "
        "the SIFs are; nothing was submitted"
    )
    assert not out.exists()
    # the variable wins over the site's image_dir; a framework's CUDA build counts
    monkeypatch.setenv("DLSUITE_IMAGE_DIR", str(tmp_path / "mine"))
    s, tasks = scheduler(tmp_path, site=APPTAINER_SITE, frameworks=["pytorch", "tensorflow"])
    with pytest.raises(ConfigError, match=r"no pytorch.sif, tensorflow.sif in .*mine \(the job's "
                       r"image directory: DLSUITE_IMAGE_DIR\)"):  # fmt: skip
        s.check_sifs(tasks)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "pytorch-cuda.sif").write_bytes(b"a SIF")
    (tmp_path / "mine" / "tensorflow.sif").write_bytes(b"a SIF")
    s.check_sifs(tasks)
    # tasks of another backend need no SIF
    s, tasks = scheduler(tmp_path, site=APPTAINER_SITE, backend="local")
    (tmp_path / "mine" / "pytorch-cuda.sif").unlink()
    s.check_sifs(tasks)


def test_describe_prints_the_script_and_submits_nothing(tmp_path: Path) -> None:
    s, tasks = scheduler(tmp_path, benchmarks=["allreduce", "allgather"])
    lines = s.describe(tasks)
    text = "\n".join(lines)
    assert "#SBATCH --array=0-1\n" in text + "\n"
    assert "# submitted with: sbatch --parsable " in text
    assert not (tmp_path / "run dir").exists()


def test_srun_inside_the_job_with_each_backend() -> None:
    # what the job's runner starts: srun around the backend's worker command, as a list
    for worker in (
        ["/opt/py env/bin/python", "-m", "suite.worker", "/r d/tasks/t.json"],  # local, venv
        ["apptainer", "exec", "--nv", "/images/pytorch.sif", "python", "-m", "suite.worker",
         "/r d/tasks/t.json"],  # a container backend's command
    ):  # fmt: skip
        launch = Launch(worker=worker, python="/opt/py env/bin/python", world_size=8, nodes=2)
        assert Srun().command(launch) == [
            "srun", "--ntasks=8", "--nodes=2", "--kill-on-bad-exit=1", "--export=ALL", *worker,
        ]  # fmt: skip


# -- grouping ------------------------------------------------------------------------------
def test_groups_keep_scaling_baselines_and_agreement_together(tmp_path: Path) -> None:
    cfg = resolve(
        {"level": ["distributed"], "quick": True, "benchmarks": ["allreduce", "data_parallel"],
         "networks": ["mlp"]}, env={})  # fmt: skip
    tasks = build(cfg)
    elements = group_tasks(tasks, 1)
    dp = [e for e in elements if e[0].benchmark == "data_parallel"]
    # one 1-rank baseline for both scalings, in the element of both scalings' 2-rank tasks
    assert dp and all(sorted(t.world_size for t in e) == [1, 2, 2] for e in dp)
    assert all({t.params["scaling"] for t in e if t.world_size == 2} == {"strong", "weak"}
               for e in dp)  # fmt: skip
    assert sum(len(e) for e in elements) == len(tasks)
    packed = group_tasks(tasks, 2)
    assert len(packed) == -(-len(elements) // 2)
    assert [t.task_id for e in packed for t in e] == [t.task_id for e in elements for t in e]


# -- records -------------------------------------------------------------------------------
def test_scheduler_section_from_slurm_variables() -> None:
    assert SlurmScheduler.record_section({}) is None
    env = {"SLURM_JOB_ID": "124", "SLURM_ARRAY_JOB_ID": "120", "SLURM_ARRAY_TASK_ID": "4",
           "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_PARTITION": "debug",
           "SLURM_CLUSTER_NAME": "c", "SLURMD_NODENAME": "node2"}  # fmt: skip
    section = SlurmScheduler.record_section(env)
    assert section == {"kind": "slurm", "job_id": "124", "array_job_id": "120",
                       "array_task_id": 4, "nodelist": "node[1-2]", "partition": "debug",
                       "cluster": "c", "node": "node2"}  # fmt: skip
    props = schemas.schema("result")["properties"]["scheduler"]["properties"]
    assert set(section) <= set(props)
    # --scheduler none inside an allocation (salloc, an array element): the job's section
    assert environment_section(env) == section
    assert environment_section({"PATH": "/usr/bin"}) is None


def test_registry_and_times() -> None:
    assert set(SCHEDULERS.names()) == {"none", "slurm"}
    assert parse_time("90") == 5400 and parse_time("1:30:00") == 5400
    assert parse_time("1-02") == 93600 and parse_time("2:30") == 150
    assert format_time(5400) == "01:30:00" and format_time(90000) == "1-01:00:00"
    assert format_time(61) == "00:02:00"


def test_shipped_sites_are_valid() -> None:
    from suite import sites

    for path in sorted((ROOT / "sites").glob("*.toml")):
        site = sites.load(str(path))
        assert site.partition in site.partitions
    local = sites.load("local")
    assert local.scheduler == "slurm" and local.launcher == "srun"
    a100 = sites.load("example-a100")
    assert a100.default_partition.gpu_gres == "gpu:a100:4"
    assert from_document({"scheduler": "slurm", "partitions": {"p": {"nodes": 1}}},
                         Path("x.toml")).partition == "p"  # fmt: skip


def test_array_task_ids_in_slurms_notation() -> None:
    from suite.schedulers.slurm import task_ids

    assert task_ids("4") == [4]
    assert task_ids("1-2%1") == [1, 2]
    assert task_ids("1,3,5-7") == [1, 3, 5, 6, 7]
    assert task_ids("") == [] and task_ids("N/A") == []


def test_schema_patterns_anchor_at_the_very_end() -> None:
    # JSON Schema patterns are ECMA-262: `$` is the end of the string, not "before a final
    # newline" as in Python's re
    site = {"scheduler": "slurm", "partitions": {"debug\n": {"nodes": 1}}, "account": "a\n"}
    problems = schemas.errors("site", site)
    assert any(p.startswith("account:") for p in problems), problems
    assert any(p.startswith("partitions:") for p in problems), problems
    assert (
        schemas.errors("site", {"scheduler": "slurm", "partitions": {"debug": {"nodes": 1}}}) == []
    )
    assert schemas.ecma_pattern(r"^[$\\]a$").pattern == r"^[$\\]a\Z"


def test_a_dry_run_the_site_refuses_prints_only_the_refusal(tmp_path: Path) -> None:
    """--nodes beyond the partition: the one-line refusal, not the whole plan before it."""
    from tests.helpers import cli

    proc = cli("run", "--site", "local", "--level", "distributed", "--quick", "--world-size",
               "4", "--nodes", "4", "--benchmark", "allreduce", "--dry-run", "--no-history",
               "--out", str(tmp_path / "r"))  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stdout
    assert "partition debug of site local has 2 node(s)" in proc.stderr


@pytest.mark.parametrize(
    ("cli", "per_node", "cpus"),
    [
        ({"world_size": 2, "nodes": 2, "device": "cpu", "partition": "cpu"}, 1, 64),
        ({"world_size": 4, "nodes": 2, "device": "cpu", "partition": "cpu"}, 2, 32),
        (
            {"level": ["operator"], "benchmarks": ["gemm"], "device": "cpu", "partition": "cpu"},
            1,
            64,
        ),
    ],
)
def test_one_rank_per_node_takes_the_nodes_cpus(
    tmp_path: Path, cli: dict[str, Any], per_node: int, cpus: int
) -> None:
    # one rank per node got Slurm's default of one CPU (no --cpus-per-task): a rank bound to
    # one core of a 64-core node under a task plugin
    s, tasks = scheduler(tmp_path, **cli)
    sp = s.spec(group_tasks(tasks, 1), tmp_path, tmp_path / "s1")
    assert (sp.ntasks_per_node, sp.cpus_per_task) == (per_node, cpus)
    text = render_script(sp)
    assert f"#SBATCH --cpus-per-task={cpus}\n" in text
    assert f"export SRUN_CPUS_PER_TASK={cpus}\n" in text


def test_sbatch_without_a_cluster_says_so_not_the_site(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dlsuite run --site S` where Slurm's commands have no configuration (SLURM_CONF unset
    beside a private cluster): the error blamed the site profile's partition, account, qos
    and limits. A real sbatch, with a configuration it cannot use."""
    import shutil

    from suite.errors import SchedulerError
    from suite.schedulers.slurm import submit

    if shutil.which("sbatch") is None:
        pytest.fail("sbatch not found: apt-get install slurm-client (tests/system-deps.sh)")
    conf = tmp_path / "slurm.conf"
    conf.write_text("")  # sbatch exits at once (a missing file: it retries for 60 s)
    monkeypatch.setenv("SLURM_CONF", str(conf))
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\ntrue\n")
    doc = {"scheduler": "slurm", "partition": "p", "partitions": {"p": {"nodes": 1}}}
    site = from_document(doc, tmp_path / "s.toml")
    with pytest.raises(SchedulerError) as err:
        submit(script, site, "p")
    message = str(err.value)
    assert message.startswith("sbatch found no Slurm controller to submit to (")
    assert "nothing was submitted" in message and "SLURM_CONF" in message
    assert "site profile" not in message
