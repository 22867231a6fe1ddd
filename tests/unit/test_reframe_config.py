"""``dlsuite reframe``: the ReFrame configuration rendered from a site profile (compared as text,
then loaded by ReFrame itself), the references each partition gets from references/, the
figures and sanity verdicts the test library (suite/reframe/dlsuite_checks.py) takes from the records."""

from __future__ import annotations

import copy
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from suite import sites
from suite.cli import main
from suite.errors import ConfigError
from suite.references import load_references
from suite.reframe import checks as rc
from suite.reframe import config as rcfg
from tests import synthetic
from tests.helpers import ROOT

CI_REFERENCES = ROOT / "references" / "cpu-2core-ci.toml"

LOCAL_CONFIG = """\
# ReFrame configuration of dlsuite site 'local', generated from {path}
# by: dlsuite reframe config --site local
# Do not edit: change the site profile and generate it again. The test library is
# suite/reframe/dlsuite_checks.py (docs/guide/integrations.md):
#   reframe -C THIS_FILE -c suite/reframe -r
site_configuration = {{
    'systems': [
        {{
            'name': 'local',
            'descr': 'make cluster-up: Slurm on localhost, 2 nodes x all cores, CPU only',
            'hostnames': ['.*'],
            'modules_system': 'nomod',
            'partitions': [
                {{
                    'name': 'debug',
                    'descr': 'local: partition debug (CPU)',
                    'scheduler': 'squeue',
                    'launcher': 'local',
                    'access': ['--partition=debug'],
                    'environs': ['dlsuite'],
                    'features': ['dlsuite', 'cpu'],
                    'extras': {{
                        'dlsuite_site': '{path}',
                        'dlsuite_partition': 'debug',
                    }},
                    'max_jobs': 1,
                }},
            ],
        }},
    ],
    'environments': [
        {{
            'name': 'dlsuite',
            'features': ['dlsuite'],
            'target_systems': ['local'],
        }},
    ],
    'logging': [
        {{
            'handlers$': [
                {{
                    'type': 'stream',
                    'name': 'stdout',
                    'level': 'info',
                    'format': '%(message)s',
                }},
            ],
            'handlers': [
                {{
                    'type': 'file',
                    'level': 'debug2',
                    'format': '[%(asctime)s] %(levelname)s: %(check_info)s: %(message)s',
                    'append': False,
                }},
            ],
            'perflog_multiline': True,
            'handlers_perflog': [
                {{
                    'type': 'filelog',
                    'prefix': '%(check_system)s/%(check_partition)s',
                    'level': 'info',
                    'format': '%(check_job_completion_time)s|%(check_display_name)s|%(check_system)s:%(check_partition)s|%(check_environ)s|%(check_perf_var)s|%(check_perf_value)s|%(check_perf_unit)s|%(check_perf_ref)s|%(check_perf_lower_thres)s|%(check_perf_upper_thres)s|%(check_perf_result)s|%(check_result)s',
                    'append': True,
                }},
            ],
            'target_systems': ['local'],
        }},
    ],
    'storage': [
        {{
            'enable': True,
            'target_systems': ['local'],
        }},
    ],
}}
"""


def write_site(tmp_path: Path, text: str, name: str = "site.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# -- the configuration, as text and as ReFrame reads it ---------------------------------------
def test_local_site_renders_exactly() -> None:
    site = sites.load("local")
    text = rcfg.render(
        rcfg.site_configuration(site), site, ["reframe", "config", "--site", "local"]
    )
    assert text == LOCAL_CONFIG.format(path=site.path)


def test_gpu_site_maps_every_sbatch_setting() -> None:
    site = sites.load("example-a100")
    cfg = rcfg.site_configuration(site, partitions=["a100"], hostnames=["login[0-9]+"])
    system = cfg["systems"][0]
    assert (system["name"], system["hostnames"], system["modules_system"]) == (
        "example-a100", ["login[0-9]+"], "lmod",
    )  # fmt: skip
    assert system["partitions"] == [
        {
            "name": "a100",
            "descr": "example-a100: partition a100 (4 GPU(s) per node)",
            "scheduler": "squeue",
            "launcher": "local",
            "access": ["--partition=a100", "--account=proj-ml", "--qos=normal",
                       "--constraint=a100", "--mem=500G"],
            "environs": ["dlsuite"],
            "features": ["dlsuite", "gpu"],
            "extras": {"dlsuite_site": str(site.path), "dlsuite_partition": "a100"},
            "env_vars": [["NCCL_DEBUG", "WARN"], ["NCCL_IB_HCA", "mlx5"],
                         ["OMP_PROC_BIND", "close"],
                         ["DLSUITE_IMAGE_DIR", "/project/dlsuite/images"]],
            "modules": ["gcc/12.2.0", "cuda/12.4", "cudnn/9.1", "nccl/2.21"],
            "prepare_cmds": ["module purge"],
            "processor": {"num_cpus": 64},
            "devices": [{"type": "gpu", "num_devices": 4}],
            "resources": [{"name": "gpu", "options": ["--gres=gpu:a100:4"]}],
        }
    ]  # fmt: skip
    assert (
        rcfg.site_configuration(site, slurm_scheduler="slurm")["systems"][0]["partitions"][1][
            "scheduler"
        ]
        == "slurm"
    )


def test_values_are_quoted_and_names_made_reframe_names(tmp_path: Path) -> None:
    path = write_site(tmp_path, """
name = "lab.2"
scheduler = "slurm"
partition = "2080.ti"
sbatch_options = ["--exclusive"]
[env]
MSG = "two words $HOME"
[partitions."2080.ti"]
nodes = 1
gpus_per_node = 2
default_time = "1-02:00:00"
""")  # fmt: skip
    site = sites.load(str(path))
    cfg = rcfg.site_configuration(site)
    system = cfg["systems"][0]
    part = system["partitions"][0]
    assert system["name"] == "lab_2"
    assert part["name"] == "_2080_ti"
    assert part["extras"]["dlsuite_partition"] == "2080.ti"  # the site's own name stays
    assert part["env_vars"] == [["MSG", "'two words $HOME'"]]  # never expanded in the job
    assert part["access"] == ["--partition=2080.ti", "--exclusive"]
    assert part["time_limit"] == f"{26 * 3600}s"
    assert part["resources"] == [{"name": "gpu", "options": ["--gres=gpu:2"]}]


def test_a_site_without_batch_system_gets_the_local_scheduler() -> None:
    site = sites.load("localhost")
    part = rcfg.site_configuration(site)["systems"][0]["partitions"][0]
    assert (part["name"], part["scheduler"], part["launcher"], part["access"]) == (
        "cpu", "local", "local", [],
    )  # fmt: skip
    assert part["max_jobs"] == 1  # one benchmark at a time on one machine


@pytest.mark.parametrize("site_name", ["local", "localhost", "example-a100"])
def test_reframe_loads_and_validates_the_generated_config(tmp_path: Path, site_name: str) -> None:
    from reframe.core.config import load_config

    site = sites.load(site_name)
    cfg = rcfg.site_configuration(site, results_db=str(tmp_path / "results.db"))
    path = tmp_path / "config.py"
    path.write_text(rcfg.render(cfg, site))
    loaded = load_config(str(path))
    loaded.validate()
    system = cfg["systems"][0]["name"]
    loaded.select_subconfig(system)
    assert loaded.get("systems/0/name") == system
    assert loaded.get("storage/0/enable") is True
    assert loaded.get("storage/0/sqlite_db_file") == str(tmp_path / "results.db")
    assert loaded.get("logging/0/perflog_multiline") is True
    for i, p in enumerate(site.partitions.values()):
        assert loaded.get(f"systems/0/partitions/{i}/extras") == {
            "dlsuite_site": str(site.path), "dlsuite_partition": p.name,
        }  # fmt: skip


def test_cli_writes_and_checks_with_reframe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rfm" / "local.py"
    assert main(["reframe", "config", "--site", "local", "--out", str(out)]) == 0
    site = sites.load("local")
    expected = LOCAL_CONFIG.format(path=site.path).replace(
        "--site local\n", f"--site local --out {out}\n"
    )
    assert out.read_text() == expected
    assert "wrote" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--site", "local", "--partition", "gpu"], ["--partition 'gpu'", "use one of: debug"]),
        (["--site", "no-such-site"], ["no-such-site", "known sites"]),
        (["--site", "local", "--system", "9lives"], ["--system '9lives'"]),
        (["--site", "local", "--modules-system", "chaos"], ["--modules-system 'chaos'"]),
        (["--site", "local", "--out", "x.json", "--no-check"], ["ends in .py"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["reframe", "config", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dlsuite: error: ")
    for w in words:
        assert w in err


def test_missing_reframe_is_one_line_naming_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # an interpreter with no `reframe` beside it and a PATH without one: as on a host where
    # reframe-hpc was never installed
    assert Path(rcfg.reframe_executable()).is_file()  # installed here (dev extra): can fail
    monkeypatch.setattr("sys.executable", str(tmp_path / "python3"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["reframe", "config", "--site", "local"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "ReFrame is not installed: pip install 'reframe-hpc>=4.7,<5'" in err
    assert "--no-check" in err
    # --no-check writes it without ReFrame
    assert main(["reframe", "config", "--site", "local", "--no-check"]) == 0
    assert "site_configuration = {" in capsys.readouterr().out


# -- references per partition -------------------------------------------------------------
def epyc_site(tmp_path: Path, device: str) -> sites.Site:
    return sites.load(str(write_site(tmp_path, f"""
name = "ci"
scheduler = "none"
[partitions.cpu]
nodes = 1
{device}
""")))  # fmt: skip


def test_partition_device_picks_the_references(tmp_path: Path) -> None:
    refs = load_references([CI_REFERENCES])
    epyc = epyc_site(tmp_path, 'device = { name = "AMD EPYC 7763 64-Core Processor", cores = 2 }')
    dev = rc.partition_device(epyc.partitions["cpu"])
    assert dev == {"name": "AMD EPYC 7763 64-Core Processor", "cores": 2, "kind": "cpu"}
    gemm = rc.partition_references(refs, dev, level="operator", benchmark="gemm",
                                   framework="pytorch", dtype="fp32")  # fmt: skip
    assert [(r.metric, r.value) for r in gemm] == [("flop_rate", 0.187), ("time", 1.794e-4)]
    conv = rc.partition_references(refs, dev, level="operator", benchmark="conv2d",
                                   framework="pytorch", dtype="fp32")  # fmt: skip
    assert [r.metric for r in conv] == ["flop_rate"]
    assert not rc.partition_references(refs, dev, level="operator", benchmark="gemm",
                                       framework="numpy", dtype="fp32")  # fmt: skip
    assert not rc.partition_references(refs, dev, level="operator", benchmark="gemm",
                                       framework="pytorch", dtype="bf16")  # fmt: skip
    # another device, a different core count, or nothing declared: none of them
    for other in ('device = { name = "Intel Xeon", cores = 2 }',
                  'device = { name = "AMD EPYC", cores = 4 }', ""):  # fmt: skip
        p = epyc_site(tmp_path, other).partitions["cpu"]
        assert not rc.partition_references(refs, rc.partition_device(p), level="operator",
                                           benchmark="gemm", framework="pytorch", dtype="fp32")  # fmt: skip


def test_references_bind_to_the_figures_they_match(tmp_path: Path) -> None:
    refs = load_references([CI_REFERENCES])
    dev = {"name": "AMD EPYC", "kind": "cpu", "cores": 2}
    gemm_refs = rc.partition_references(refs, dev, level="operator", benchmark="gemm",
                                        framework="pytorch", dtype="fp32")  # fmt: skip
    small = synthetic.operator_record("gemm", {"m": 256, "n": 256, "k": 256})
    large = synthetic.operator_record("gemm", {"m": 512, "n": 512, "k": 512})
    ref = rc.reframe_reference([small, large], gemm_refs)
    # flop_rate is higher-is-better: only the floor; time lower-is-better: only the ceiling
    assert ref == {
        "gemm[k=256,m=256,n=256].flop_rate": (0.187, -0.5, None, "TFLOP/s"),
        "gemm[k=256,m=256,n=256].time": (1.794e-4, None, 1.0, "s"),
    }
    figs = rc.figures([small, large])
    assert list(figs) == [
        f"gemm[k={n},m={n},n={n}].{m}" for n in (256, 512)
        for m in ("time", "flop_rate", "bandwidth", "percent_of_peak")
    ]  # fmt: skip
    assert {f.unit for f in figs.values()} == {"s", "TFLOP/s", "GB/s", "%"}


def test_a_figure_measured_busy_gets_no_reference_unless_asked() -> None:
    """A record measured while the quiet check found other load: `dlsuite check-references`
    leaves it unjudged, but the ReFrame test bound its references and failed (or passed) on
    it silently. Its figures are logged without a reference, with a note saying why;
    dlsuite_include_busy judges them."""
    refs = load_references([CI_REFERENCES])
    dev = {"name": "AMD EPYC", "kind": "cpu", "cores": 2}
    gemm_refs = rc.partition_references(refs, dev, level="operator", benchmark="gemm",
                                        framework="pytorch", dtype="fp32")  # fmt: skip
    busy = synthetic.operator_record("gemm", {"m": 256, "n": 256, "k": 256}, time_s=1.0)
    synthetic.mark_busy(busy)
    assert rc.reframe_reference([busy], gemm_refs) == {}
    assert set(rc.reframe_reference([busy], gemm_refs, include_busy=True)) == {
        "gemm[k=256,m=256,n=256].flop_rate", "gemm[k=256,m=256,n=256].time"}  # fmt: skip
    note = rc.busy_note([busy], judged=False)
    assert note is not None and note.startswith(
        f"4 figure(s) measured while the machine was busy ({synthetic.BUSY_MESSAGE}): logged, "
        "not judged"
    ), note
    quiet = synthetic.operator_record("gemm", {"m": 256, "n": 256, "k": 256})
    assert rc.busy_note([quiet], judged=False) is None
    assert len(rc.reframe_reference([quiet], gemm_refs)) == 2


def test_reference_unit_must_be_the_records(tmp_path: Path) -> None:
    path = tmp_path / "refs.toml"
    path.write_text("""
[[reference]]
level = "operator"
benchmark = "gemm"
metric = "time"
value = 180.0
upper = 1.0
unit = "us"
""")
    refs = load_references([path])
    with pytest.raises(ConfigError, match=r"unit 'us', but time is recorded in 's'"):
        rc.reframe_reference([synthetic.operator_record()], refs)


def test_reference_tuple_keeps_the_failing_side_only() -> None:
    from suite.references import Reference

    both = Reference("operator", "gemm", "flop_rate", 2.0, lower=-1.5, upper=0.2, unit="TFLOP/s")
    assert rc.reference_tuple(both, higher_is_better=True) == (2.0, -1.0, None, "TFLOP/s")
    assert rc.reference_tuple(both, higher_is_better=False) == (2.0, None, 0.2, "TFLOP/s")
    negative = Reference("operator", "gemm", "x", -1.0, lower=-0.1)
    assert rc.reference_tuple(negative, higher_is_better=True) is None


def test_distributed_names_carry_the_ranks_and_stay_reframe_safe() -> None:
    rec = synthetic.collective_record()
    names = list(rc.figures([rec]))
    assert names and all(n.startswith(f"{rec['benchmark']['name']}[") for n in names)
    assert all(f"@w{rec['world_size']}." in n for n in names)
    odd = synthetic.operator_record("gemm", {"m": 8, "note": "a b:c|d/e"})
    (name, *_) = rc.figures([odd])
    assert name == "gemm[m=8,note=a_b_c_d_e].time"  # no space, ':' (scopes), '|' or '/'
    twice = rc.figures([odd, copy.deepcopy(odd)])
    assert "gemm[m=8,note=a_b_c_d_e].time#2" in twice


# -- sanity --------------------------------------------------------------------------------
def test_sanity_passes_good_records_and_names_every_problem() -> None:
    good = synthetic.operator_record()
    assert rc.sanity_problems([good]) == []
    assert rc.sanity_problems([]) == [
        "no records: dlsuite run wrote nothing (see the test's stdout and stderr)"
    ]
    wrong = synthetic.operator_record("softmax", {"rows": 4, "cols": 8}, error=1.0, tolerance=1e-5)
    failed = synthetic.failed_record("conv2d")
    skipped = synthetic.skipped_record("attention")
    invalid: dict[str, Any] = copy.deepcopy(good)
    del invalid["metrics"][0]["unit"]
    problems = rc.sanity_problems([good, wrong, failed, skipped, invalid])
    assert len(problems) == 4, problems
    assert problems[0].startswith("softmax[cols=8,rows=4] w1: correctness failed (")
    assert "c.max_rel_error_vs_fp64" in problems[0]
    assert problems[1].startswith("conv2d[") and ": status failed" in problems[1]
    assert problems[2].startswith("attention[") and ": status skipped (" in problems[2]
    assert "not schema-valid" in problems[3] and "unit" in problems[3]


def test_sanity_checks_the_declared_device() -> None:
    rec = synthetic.operator_record()  # AMD EPYC, 2 cores
    assert rc.sanity_problems([rec], declared_device={"name": "epyc", "cores": 2}) == []
    (p,) = rc.sanity_problems([rec], declared_device={"name": "Xeon"}, where="site s, partition p")
    assert "device 'AMD EPYC' is not the declared 'Xeon' in site s, partition p" in p
    assert "fix the partition's device in the site profile" in p
    (p,) = rc.sanity_problems([rec], declared_device={"kind": "gpu"})
    assert "device kind = 'cpu', declared 'gpu'" in p


def test_command_line_leaves_slurm_to_reframe() -> None:
    argv = rc.dlsuite_command(
        python="/opt/py", site=Path("/s/local.toml"), level="distributed", benchmark="allreduce",
        framework="pytorch", dtype="fp32", out="/stage/run", world_size=4, nodes=2,
        config="/c.toml", timeout=60, extra=["--backend", "venv"],
    )  # fmt: skip
    assert argv == ["/opt/py", "-m", "suite", "run", "--site", "/s/local.toml", "--scheduler",
                    "none", "--level", "distributed", "--benchmark", "allreduce", "--framework",
                    "pytorch", "--dtype", "fp32", "--out", "/stage/run", "--quick",
                    "--world-size", "4", "--nodes", "2", "--config", "/c.toml", "--timeout", "60",
                    "--backend", "venv"]  # fmt: skip


def test_a_relative_dlsuite_config_names_the_file_from_the_job(tmp_path: Path) -> None:
    """-S dlsuite_config=tests/fast-measure.toml, as integrations.md writes it, is relative to
    where reframe started; the job runs in its stage directory, so the job script must name the
    file by its absolute path (it said `--config tests/fast-measure.toml`: cannot read it)."""
    (tmp_path / "measure.toml").write_text((ROOT / "tests" / "fast-measure.toml").read_text())
    site = sites.load("localhost")
    (tmp_path / "cfg.py").write_text(rcfg.render(rcfg.site_configuration(site), site))
    env = {**os.environ, "PYTHONPATH": str(ROOT), rc.ENV_FRAMEWORKS: "numpy",
           "RFM_SQLITE_DB_FILE": str(tmp_path / "results.db")}  # fmt: skip
    proc = subprocess.run(
        [rcfg.reframe_executable(), "-C", "cfg.py", "-c", str(ROOT / "suite" / "reframe"),
         "-n", "DlsuiteOperator%benchmark=gemm", "--prefix", ".",
         "-S", "dlsuite_config=measure.toml", "--dry-run"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (script,) = tmp_path.glob("stage/localhost/cpu/dlsuite/*/rfm_job.sh")
    line = next(x for x in script.read_text().splitlines() if " -m suite run " in x)
    argv = shlex.split(line)
    config = Path(argv[argv.index("--config") + 1])
    assert config == tmp_path / "measure.toml" and config.is_file()


def test_parameter_space_from_the_environment() -> None:
    assert rc.frameworks({rc.ENV_FRAMEWORKS: "pytorch, numpy"}) == ["pytorch", "numpy"]
    assert rc.dtypes({}) == ["fp32"] and rc.dtypes({rc.ENV_DTYPES: "fp32,bf16"}) == ["fp32", "bf16"]
    assert rc.world_sizes({}) == [2] and rc.world_sizes({rc.ENV_WORLD_SIZES: "2,4"}) == [2, 4]
    with pytest.raises(ConfigError, match="unknown framework 'pytorh'"):
        rc.frameworks({rc.ENV_FRAMEWORKS: "pytorh"})
    with pytest.raises(ConfigError, match="unknown dtype 'fp8'"):
        rc.dtypes({rc.ENV_DTYPES: "fp8"})
    with pytest.raises(ConfigError, match="give positive integers"):
        rc.world_sizes({rc.ENV_WORLD_SIZES: "0"})
    assert "agreement" not in rc.benchmarks("network") and "gemm" in rc.benchmarks("operator")
    # the default: what runs here (PyTorch and NumPy in the suite's own environment)
    assert {"pytorch", "numpy"} <= set(rc.frameworks({}))


def test_unsupported_combinations_are_skipped_not_failed() -> None:
    assert rc.unsupported("operator", "gemm", "numpy") is None
    assert rc.unsupported("distributed", "allreduce", "pytorch") is None
    assert rc.unsupported("distributed", "allreduce", "numpy") == (
        "numpy does not implement the word(s) distributed: NumPy has no distributed runtime, "
        "and the suite writes none of its own (a distributed word maps a framework's own runtime)"
    )
    assert rc.unsupported("operator", "gemm", "horovod")  # a distributed-only adapter
    env = {rc.ENV_FRAMEWORKS: "pytorch,numpy,horovod"}
    assert rc.frameworks(env, level="distributed") == ["pytorch", "horovod"]
    assert rc.frameworks(env, level="operator") == ["pytorch", "numpy"]


def test_site_partition_from_extras(tmp_path: Path) -> None:
    sp = rc.site_partition({"dlsuite_site": str(ROOT / "sites" / "local.toml"),
                            "dlsuite_partition": "debug"}, "local:debug")  # fmt: skip
    assert (sp.site.name, sp.partition.name) == ("local", "debug")
    with pytest.raises(ConfigError, match="has no partition 'gone'.*dlsuite reframe config"):
        rc.site_partition({"dlsuite_site": str(ROOT / "sites" / "local.toml"),
                           "dlsuite_partition": "gone"}, "local:gone")  # fmt: skip
    with pytest.raises(ConfigError, match="no dlsuite_site/dlsuite_partition extras"):
        rc.site_partition({}, "other:part")
