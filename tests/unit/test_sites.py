"""Site profiles: a bad profile or a bad Slurm flag is one line naming the field and the fix,
exit code 2, no traceback (through the real CLI); where --site finds profiles; the layering
CLI > environment > config file > site > defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.config import resolve
from suite.errors import ConfigError
from tests.helpers import cli

GOOD = """
scheduler = "slurm"
partition = "debug"
[partitions.debug]
nodes = 2
"""


def one_line_error(proc, *needles: str) -> str:  # type: ignore[no-untyped-def]
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("dlsuite: error:"), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        (GOOD.replace('partition = "debug"', 'partition = "gpu"'), ["partition = 'gpu'", "debug"]),
        (GOOD + "gres = 'gpu:4'\n", ["partitions.debug.gres", "gpus_per_node"]),
        (GOOD.replace("nodes = 2", "nodes = 0"), ["partitions.debug.nodes", "minimum"]),
        (GOOD.replace("nodes = 2", 'nodes = "two"'), ["partitions.debug.nodes", "integer"]),
        (GOOD + "max_time = '2 hours'\n", ["partitions.debug.max_time", "does not match",
                                            "a Slurm time: MM, MM:SS, HH:MM:SS, D-HH"]),
        ('account = "x; rm -rf /"\n' + GOOD, ["account", "does not match"]),
        ('partition = "$(reboot)"\n' + GOOD.replace('partition = "debug"\n', ""),
         ["partition", "does not match"]),
        ('modules = ["cuda/12.4; id"]\n' + GOOD, ["modules[0]", "does not match"]),
        ('sbatch_options = ["--uid=0 --x"]\n' + GOOD, ["sbatch_options[0]"]),
        ('launcher = "ssh"\n' + GOOD, ["launcher", "srun"]),
        ('backend = "apptainer"\n' + GOOD, ["backend = 'apptainer' needs image_dir (where its SIFs are)"]),
        ('colour = "red"\n' + GOOD, ["colour", "site.schema.json"]),
        (GOOD + "[env]\nX = '''a\nb'''\n", ["env.X", "control character"]),
        # a final newline passed Python's `$`-anchored whitelists and split an #SBATCH line
        ('account = "proj\\n"\n' + GOOD, ["account", "'\\n'"]),
        ('qos = "high\\n#SBATCH --uid=0"\n' + GOOD, ["qos", "'\\n'"]),
        (GOOD.replace('[partitions.debug]', '[partitions."debug\\n"]'),
         ["partitions.'debug\\n' (the key)", "control character"]),
        (GOOD + "[env]\nX = \"a\\u001b[2Jb\"\n", ["env.X", "'\\x1b'"]),
        (GOOD + "[env]\nX = \"tab\\there\"\n", ["env.X", "'\\t'"]),
        ('image_dir = "/img\\r"\n' + GOOD, ["image_dir", "'\\r'"]),
        ('modules = ["cuda/12.4\\n"]\n' + GOOD, ["modules[0]", "'\\n'"]),
        ('image_dir = "/a\\\\b"\n' + GOOD, ["image_dir"]),
        # read relative to the run directory on the nodes, to the working directory here
        ('backend = "apptainer"\nimage_dir = "sifs"\n' + GOOD,
         ["image_dir = 'sifs' is relative", "give an absolute path"]),
        ("scheduler = [\n", ["TOML syntax error"]),
        (GOOD.replace('scheduler = "slurm"\n', ""), ["'scheduler' is a required property"]),
    ],
)  # fmt: skip
def test_bad_site_profile(tmp_path: Path, text: str, needles: list[str]) -> None:
    site = tmp_path / "bad site.toml"
    site.write_text(text)
    proc = cli("run", "--quick", "--site", str(site), "--dry-run")
    line = one_line_error(proc, *needles)
    assert str(site) in line


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--site", "no-such-site"], ["no-such-site", "known sites", "local"]),
        (["--site", "../x"], ["no such file"]),
        (["--site", "local", "--job-name", "x; rm -rf /"], ["--job-name 'x; rm -rf /'"]),
        (["--site", "local", "--partition", "$(reboot)"], ["--partition", "debug"]),
        (["--site", "local", "--tasks-per-job", "0"], ["--tasks-per-job 0"]),
        (["--scheduler", "slurm"], ["needs --site"]),
        (["--scheduler", "pbs"], ["--scheduler 'pbs'", "slurm"]),
        (["--job-name", "ok"], ["--job-name: only with --scheduler slurm"]),
        (["--site", "local", "--device", "cuda"], ["partition debug of site local has no GPUs"]),
        (["--site", "local", "--world-size", "6", "--nodes", "3"],
         ["--nodes 3", "2 node(s)"]),
        (["--site", "local", "--out", "/tmp/a\nb"], ["--out", "newline"]),
        (["--site", "local", "--out", "/tmp/100%"], ["'%'"]),
    ],
)  # fmt: skip
def test_bad_slurm_flags(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    if "--out" not in args:
        args = [*args, "--out", str(tmp_path / "run")]
    proc = cli("run", "--quick", "--benchmark", "gemm,allreduce", "--level", "operator,distributed",
               *args, "--dry-run")  # fmt: skip
    one_line_error(proc, *needles)


def test_site_by_name_path_and_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mine.toml").write_text('name = "mine"\n' + GOOD)
    monkeypatch.setenv("DLSUITE_SITES_DIR", str(tmp_path))
    cfg = resolve({"site": "mine", "quick": True}, env={})
    assert (cfg.scheduler, cfg.launcher) == ("slurm", "srun")  # implied by the site
    cfg = resolve({"site": str(tmp_path / "mine.toml")}, env={})
    assert cfg.scheduler == "slurm"
    cfg = resolve({"site": "local"}, env={})  # the shipped one, after DLSUITE_SITES_DIR
    assert cfg.site == "local"


def test_site_is_the_lowest_layer_above_defaults(tmp_path: Path) -> None:
    site = tmp_path / "s.toml"
    site.write_text('launcher = "mpirun"\nbackend = "venv"\n' + GOOD)
    cfg = resolve({"site": str(site)}, env={})
    assert (cfg.launcher, cfg.backend, cfg.scheduler) == ("mpirun", "venv", "slurm")
    conf = tmp_path / "c.toml"
    conf.write_text('[run]\nlauncher = "torchrun"\n')
    cfg = resolve({"site": str(site), "config": str(conf)}, env={"DLSUITE_BACKEND": "local"})
    assert (cfg.launcher, cfg.backend) == ("torchrun", "local")  # file and environment win
    cfg = resolve({"site": str(site), "scheduler": "none", "launcher": "spawn"}, env={})
    assert (cfg.scheduler, cfg.launcher) == ("none", "spawn")  # flags win
    cfg = resolve({}, env={"DLSUITE_SITE": str(site)})
    assert cfg.scheduler == "slurm"


def test_unknown_site_backend_is_named(tmp_path: Path) -> None:
    site = tmp_path / "s.toml"
    site.write_text('backend = "apptainer"\nimage_dir = "/img"\n' + GOOD)
    assert resolve({"site": str(site)}, env={}).backend == "apptainer"  # a registered one
    site.write_text('backend = "podman"\n' + GOOD)
    with pytest.raises(ConfigError, match="backend = 'podman': not a backend in this version"):
        resolve({"site": str(site)}, env={})
    # also when a flag would win over it: the profile itself is wrong
    with pytest.raises(ConfigError, match=r"apptainer, docker, local, venv \(or give --backend\)"):
        resolve({"site": str(site), "backend": "local"}, env={})


def test_a_docker_site_needs_no_image_dir(tmp_path: Path) -> None:
    """The docker backend takes its images from each node's Docker daemon (DLSUITE_IMAGE_TAG,
    DLSUITE_IMAGE_REPO) and never reads image_dir: a docker site without one is a site (it
    was refused, "needs image_dir (where its images are)"); an apptainer site still needs it."""
    site = tmp_path / "s.toml"
    site.write_text('backend = "docker"\n' + GOOD)
    assert resolve({"site": str(site)}, env={}).backend == "docker"
    site.write_text('backend = "apptainer"\n' + GOOD)
    with pytest.raises(ConfigError, match="needs image_dir"):
        resolve({"site": str(site)}, env={})


def test_a_rank_gets_its_share_of_a_nodes_cpus_and_one_rank_gets_them_all() -> None:
    """The suite's Slurm jobs and its ReFrame checks ask alike; one rank per node asked for
    no CPUs in ReFrame's checks (Slurm's default: one CPU per task, the rank bound to it)."""
    from suite.sites import Partition

    p = Partition(name="cpu", nodes=4, cpus_per_node=64)
    assert [p.cpus_per_task(n) for n in (1, 2, 3, 64, 128)] == [64, 32, 21, 1, 1]
    assert Partition(name="gpu", nodes=2).cpus_per_task(1) is None  # the site does not say
