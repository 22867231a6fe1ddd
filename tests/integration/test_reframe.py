"""ReFrame runs the test library (suite/reframe/dlsuite_checks.py) for real: reframe-hpc from PyPI (the dev
extra), a configuration written by ``dlsuite reframe config``, one quick operator check (gemm)
and one 2-rank distributed check (allreduce), both PyTorch.

Local variant (CI): ReFrame's local scheduler; sanity passes on both, a reference made
deliberately tight fails gemm in ReFrame's performance phase, the perflog holds every figure of
the records with its unit, ReFrame's results database holds the figures and
``--performance-compare`` reads them back. About 40 s of 2 cores.

Slurm variant (marked ``slurm``): the same two checks through ReFrame's ``squeue`` scheduler on
a local two-node cluster of its own (the fixture of test_slurm.py): the records carry ReFrame's
job, the ranks started with srun inside it. About 1 minute.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from suite.reframe import checks as rc
from suite.reframe.config import reframe_executable
from suite.results import validate_file
from tests.helpers import FAST_MEASURE, ROOT, cli, records_at
from tests.integration.test_slurm import cluster  # noqa: F401 - the local Slurm cluster fixture

pytestmark = [pytest.mark.pytorch, pytest.mark.slow]

GEMM = "DlsuiteOperator %benchmark=gemm %framework=pytorch %dtype=fp32"
ALLREDUCE = "DlsuiteDistributed %benchmark=allreduce %framework=pytorch %dtype=fp32 %world_size=2"
SELECT = ["-n", "DlsuiteOperator%benchmark=gemm%framework=pytorch",
          "-n", "DlsuiteDistributed%benchmark=allreduce%framework=pytorch"]  # fmt: skip

#: the tight one no CPU meets (1 PFLOP/s); two loose ones every run meets
REFERENCES = """
[[reference]]
level = "operator"
benchmark = "gemm"
framework = "pytorch"
dtype = "fp32"
device_kind = "cpu"
metric = "flop_rate"
value = 1000.0
lower = -0.1
unit = "TFLOP/s"
note = "deliberately tight"

[[reference]]
level = "operator"
benchmark = "gemm"
framework = "pytorch"
device_kind = "cpu"
metric = "time"
value = 10.0
upper = 1.0
unit = "s"

[[reference]]
level = "distributed"
benchmark = "allreduce"
params = { message_bytes = 1048576 }
world_size = 2
device_kind = "cpu"
metric = "busbw"
value = 1e-6
lower = -0.5
unit = "GB/s"
"""

SITE = """
name = "rfmtest"
description = "this machine, for test_reframe.py"
scheduler = "none"
launcher = "auto"
partition = "cpu"
[partitions.cpu]
nodes = 1
device = { kind = "cpu" }
"""


@dataclass
class Session:
    workdir: Path
    config: Path
    proc: subprocess.CompletedProcess[str]
    report: dict[str, Any]
    env: dict[str, str]

    def case(self, name: str) -> dict[str, Any]:
        (tc,) = [tc for tc in self.report["runs"][-1]["testcases"] if tc["display_name"] == name]
        return tc

    def records(self, name: str) -> list[dict[str, Any]]:
        tc = self.case(name)
        # a passed test's stage moves to the output directory (keep_files); a failed one stays
        where = Path(tc["outputdir"] if tc["result"] == "pass" else tc["stagedir"])
        path = where / "run" / "results.jsonl"
        assert validate_file(path) > 0  # schema-valid, as dlsuite validate says
        return records_at(path)


def run_reframe(workdir: Path, site: Path, extra_env: dict[str, str], *args: str) -> Session:
    config = workdir / "config.py"
    made = cli("reframe", "config", "--site", str(site), "--out", str(config), env=extra_env)
    assert made.returncode == 0, made.stderr  # ReFrame loaded and accepted it
    env = {
        **os.environ, **extra_env,
        "PYTHONPATH": str(ROOT),
        "RFM_SQLITE_DB_FILE": str(workdir / "results.db"),
        "RFM_PERFLOG_DIR": str(workdir / "perflogs"),
        rc.ENV_FRAMEWORKS: "pytorch",
    }  # fmt: skip
    proc = subprocess.run(
        [reframe_executable(), "-C", str(config), "-c", str(ROOT / "suite" / "reframe"),
         "--prefix", str(workdir), *SELECT, "-S", f"dlsuite_config={FAST_MEASURE}", *args,
         "-r", "--report-file", str(workdir / "report.json")],
        capture_output=True, text=True, timeout=900, cwd=workdir, env=env,
    )  # fmt: skip
    report = json.loads((workdir / "report.json").read_text())
    return Session(workdir, config, proc, report, env)


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    workdir = tmp_path_factory.mktemp("reframe-local")
    site = workdir / "site.toml"
    site.write_text(SITE)
    # judged busy or not: the tight reference must fail on a loaded CI machine too
    yield run_reframe(workdir, site, {}, "-S", f"dlsuite_references={references(workdir)}",
                      "-S", "dlsuite_include_busy=true")  # fmt: skip


def references(workdir: Path) -> Path:
    refs = workdir / "references"
    refs.mkdir()
    (refs / "test.toml").write_text(REFERENCES)
    return refs


def assert_tight_reference_fails(session: Session) -> None:
    out = session.proc.stdout + session.proc.stderr
    assert session.proc.returncode == 1, out  # one test failed: the tight reference
    assert "Ran 2/2 test case(s) from 2 check(s) (1 failure(s)" in out
    gemm, allreduce = session.case(GEMM), session.case(ALLREDUCE)
    assert allreduce["result"] == "pass", allreduce["fail_reason"]
    # sanity (every record ok, correct, schema-valid) passed: it failed after, on performance
    assert (gemm["result"], gemm["fail_phase"]) == ("fail", "performance")
    assert "gemm[k=256,m=256,n=256].flop_rate=" in gemm["fail_reason"]
    assert "expected 1000.0 (l=900.0, u=inf)" in gemm["fail_reason"]
    for name in (GEMM, ALLREDUCE):
        assert rc.sanity_problems(session.records(name)) == []


def perflog(session: Session, system: str, partition: str, test: str) -> list[list[str]]:
    path = session.workdir / "perflogs" / system / partition / f"{test}.log"
    lines = path.read_text().splitlines()
    assert lines[0].startswith("job_completion_time|display_name|")  # the header
    return [line.split("|") for line in lines[1:]]


def test_sanity_passes_and_a_tight_reference_fails(local: Session) -> None:
    assert_tight_reference_fails(local)
    # the ranks were started by the suite's launcher inside ReFrame's job
    ranks = {r["distributed"]["launcher"] for r in local.records(ALLREDUCE)}
    assert ranks == {"torchrun"} and {r["world_size"] for r in local.records(ALLREDUCE)} == {2}


def test_perflog_holds_every_figure_with_its_unit_and_reference(local: Session) -> None:
    for test, name in (("DlsuiteOperator", GEMM), ("DlsuiteDistributed", ALLREDUCE)):
        figures = rc.figures(local.records(name))
        assert len(figures) >= 4
        rows = [r for r in perflog(local, "rfmtest", "cpu", test) if r[1] == name]
        logged = {r[4]: (float(r[5]), r[6]) for r in rows}
        assert set(logged) == set(figures)
        for var, fig in figures.items():
            assert logged[var][:2] == (fig.value, fig.unit), var
    gemm = {r[4]: r for r in perflog(local, "rfmtest", "cpu", "DlsuiteOperator")}
    # the references bound from references files: value, lower, upper, the figure's verdict,
    # the test's
    assert gemm["gemm[k=256,m=256,n=256].flop_rate"][7:] == ["1000.0", "-0.1", "null", "fail",
                                                              "fail"]  # fmt: skip
    assert gemm["gemm[k=256,m=256,n=256].time"][7:] == ["10.0", "null", "1.0", "pass", "fail"]
    assert gemm["gemm[k=256,m=256,n=256].bandwidth"][7:] == ["0", "null", "null", "pass", "fail"]
    allreduce = {r[4]: r for r in perflog(local, "rfmtest", "cpu", "DlsuiteDistributed")}
    key = "allreduce[elements=262144,message_bytes=1048576,requested_bytes=1048576]@w2.busbw"
    assert allreduce[key][6:] == ["GB/s", "1e-06", "-0.5", "null", "pass", "pass"]


def test_results_database_holds_the_figures(local: Session) -> None:
    uuid = local.report["session_info"]["uuid"]
    exe = reframe_executable()
    described = subprocess.run(
        [exe, "-C", str(local.config), f"--describe-stored-sessions={uuid}"],
        capture_output=True, text=True, timeout=120, env=local.env, cwd=local.workdir,
    )  # fmt: skip
    assert described.returncode == 0, described.stderr
    (stored,) = json.loads(described.stdout)
    cases = {tc["display_name"]: tc for tc in stored["runs"][0]["testcases"]}
    for name in (GEMM, ALLREDUCE):
        figures = rc.figures(local.records(name))
        values = {k.split(":", 2)[2]: v for k, v in cases[name]["perfvalues"].items()}
        assert {k: (v[0], v[4]) for k, v in values.items()} == {
            k: (f.value, f.unit) for k, f in figures.items()
        }
    compared = subprocess.run(
        [exe, "-C", str(local.config), "--performance-compare=now-1d:now/now-1d:now/mean:/",
         "-n", "DlsuiteOperator"],
        capture_output=True, text=True, timeout=120, env=local.env, cwd=local.workdir,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    assert "gemm[k=256,m=256,n=256].flop_rate" in compared.stdout
    assert "TFLOP/s" in compared.stdout


@pytest.mark.slurm
def test_through_slurm_with_reframes_squeue_scheduler(
    cluster: dict[str, str],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    # sites/local.toml declares no device: its partition is a CPU one, so the references with
    # device_kind = "cpu" apply (those of references/ name an AMD EPYC: not these)
    refs = references(tmp_path)
    # the partition says how many CPUs a node has (the cluster's nodes: CPUs=$(nproc)): a
    # 1-rank check asked for none, so Slurm gave its one CPU per task, and a rank bound to it
    cpus = len(os.sched_getaffinity(0))
    site = tmp_path / "local.toml"
    site.write_text(
        (ROOT / "sites" / "local.toml")
        .read_text()
        .replace("[partitions.debug]\n", f"[partitions.debug]\ncpus_per_node = {cpus}\n", 1)
    )
    session = run_reframe(tmp_path, site, cluster,
                          "-S", f"dlsuite_references={refs}", "-S", "dlsuite_include_busy=true")  # fmt: skip
    assert_tight_reference_fails(session)
    config = session.config.read_text()
    assert "'scheduler': 'squeue'" in config and "'access': ['--partition=debug']" in config
    for name in (GEMM, ALLREDUCE):
        tc = session.case(name)
        assert tc["scheduler"] == "squeue" and tc["jobid"]
        for r in session.records(name):  # every record ran inside ReFrame's own job
            s = r["scheduler"]
            assert (s["kind"], s["job_id"], s["partition"]) == ("slurm", str(tc["jobid"]), "debug")
    assert {r["distributed"]["launcher"] for r in session.records(ALLREDUCE)} == {"srun"}
    script = (Path(session.case(ALLREDUCE)["outputdir"]) / "rfm_job.sh").read_text()
    assert "#SBATCH --ntasks=2\n" in script and "#SBATCH --partition=debug\n" in script
    assert f"#SBATCH --cpus-per-task={max(1, cpus // 2)}\n" in script  # 2 ranks on one node
    gemm_script = (Path(session.case(GEMM)["stagedir"]) / "rfm_job.sh").read_text()  # it failed
    assert f"#SBATCH --cpus-per-task={cpus}\n" in gemm_script  # one rank: the node's CPUs
    assert " --scheduler none " in script  # the suite submits no job of its own
    for test, name in (("DlsuiteOperator", GEMM), ("DlsuiteDistributed", ALLREDUCE)):
        rows = perflog(session, "local", "debug", test)
        logged = {r[4]: (float(r[5]), r[6]) for r in rows}
        assert logged == {
            k: (f.value, f.unit) for k, f in rc.figures(session.records(name)).items()
        }
