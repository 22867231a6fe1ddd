"""The host side imports no deep-learning framework (DESIGN: login nodes have none)."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT

FRAMEWORKS = ("torch", "tensorflow", "jax", "mxnet", "horovod", "keras")


def test_host_side_imports_no_framework() -> None:
    code = f"""
import sys
import suite, metrics, schemas
import suite.cli, suite.config, suite.plan, suite.runner, suite.results, suite.summary
import suite.backends.local, suite.adapters, suite.adapters.pytorch, suite.levels.operator
import suite.levels.network, suite.levels.network.zoo, suite.levels.network.benchmarks
import suite.levels.distributed, suite.levels.distributed.benchmarks, suite.launchers, suite.aggregate
import suite.report, suite.compare, suite.references
import suite.sites, suite.schedulers, suite.schedulers.slurm, suite.schedulers.job
from suite.adapters import ADAPTERS
from suite.levels import benchmark_names, load_benchmark
from suite import config, plan
from suite.levels import LEVELS
for level in LEVELS:
    for name in benchmark_names(level):
        load_benchmark(level, name)
cls = ADAPTERS.load("pytorch")
assert cls.available()[0], "PyTorch must be installed for this test to mean something"
plan.build(config.resolve({{"quick": True, "level": ["all"]}}, env={{}}))
slurm_cfg = config.resolve({{"quick": True, "level": ["all"], "site": "example-a100"}}, env={{}})
slurm_cfg.out = "/tmp/dlsuite-light"
suite.schedulers.SCHEDULERS.load("slurm")(slurm_cfg).describe(plan.build(slurm_cfg))
suite.cli.main(["list", "--json"])
loaded = [m for m in {FRAMEWORKS!r} if m in sys.modules]
assert not loaded, f"host side imported {{loaded}}"
print("LIGHT")
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("LIGHT")
