"""The host side imports no deep-learning framework (DESIGN: login nodes have none).

Every registered adapter class is loaded, and no adapter's framework (its ``module``) may be
imported by then: a new adapter that imports its framework at module level fails here (or, if
the framework is not installed here, fails to load), with no list to extend."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT

#: besides every adapter's ``module``: libraries a framework brings along
FRAMEWORKS = ("torch", "tensorflow", "jax", "mxnet", "horovod", "keras")


def _host_side(
    register: str = "", pythonpath: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Load every host-side module, every benchmark and every registered adapter class, plan
    every level, render a Slurm job, list: then no adapter's framework may be in sys.modules.
    ``register`` is code run first (an extra adapter registered for the test)."""
    code = f"""
import sys
import suite, suite.metrics, suite.schemas
import suite.cli, suite.config, suite.plan, suite.runner, suite.results, suite.summary
import suite.backends.local, suite.adapters, suite.adapters.pytorch.adapter, suite.levels.operator
import suite.levels.network, suite.onnx.zoo, suite.levels.network.benchmarks
import suite.levels.distributed, suite.levels.distributed.benchmarks, suite.launchers, suite.aggregate
import suite.report, suite.compare, suite.references
import suite.sites, suite.schedulers, suite.schedulers.slurm, suite.schedulers.job
from suite.adapters import ADAPTERS
from suite.levels import benchmark_names, load_benchmark
from suite import config, plan
from suite.levels import LEVELS
{register}
for level in LEVELS:
    for name in benchmark_names(level):
        load_benchmark(level, name)
# the check means something only where a framework is installed: CI's .venv has PyTorch, a
# contributor's framework environment (.venvs/<framework>-<hash>) has theirs, without PyTorch
installed = [n for n in ADAPTERS.names() if n != "numpy" and ADAPTERS.load(n).available()[0]]
assert installed, "no registered framework is installed here: the check would mean nothing"
frameworks = set({FRAMEWORKS!r})
for name in ADAPTERS.names():
    frameworks.add(ADAPTERS.load(name).module)  # loading the class imports no framework
frameworks.discard("numpy")  # the suite's own dependency (the NumPy adapter computes with it)
plan.build(config.resolve({{"quick": True, "level": ["all"]}}, env={{}}))
slurm_cfg = config.resolve({{"quick": True, "level": ["all"], "site": "example-a100"}}, env={{}})
slurm_cfg.out = "/tmp/dlsuite-light"
suite.schedulers.SCHEDULERS.load("slurm")(slurm_cfg).describe(plan.build(slurm_cfg))
suite.cli.main(["list", "--json"])
loaded = sorted(m for m in frameworks if m in sys.modules)
assert not loaded, f"host side imported {{loaded}}"
print("LIGHT")
"""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), str(ROOT)])
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )


def test_host_side_imports_no_framework() -> None:
    out = _host_side()
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("LIGHT")


def test_a_new_adapter_importing_its_framework_at_module_level_is_caught(tmp_path: Path) -> None:
    """With no list to extend: the framework is the registered adapter's ``module``."""
    (tmp_path / "dlsuite_fakefw").mkdir()
    (tmp_path / "dlsuite_fakefw" / "__init__.py").write_text("")
    (tmp_path / "fakefw_adapter.py").write_text(
        "import dlsuite_fakefw  # the mistake: at module level\n"
        "from suite.adapters.numpy.adapter import NumPyAdapter\n\n\n"
        "class FakeAdapter(NumPyAdapter):\n"
        "    name = 'fakefw'\n"
        "    module = 'dlsuite_fakefw'\n"
        "    distribution = 'dlsuite-fakefw'\n"
    )
    register = 'ADAPTERS.register("fakefw", "fakefw_adapter:FakeAdapter")'
    out = _host_side(register, tmp_path)
    assert out.returncode != 0 and "host side imported ['dlsuite_fakefw']" in out.stderr, (
        out.stdout + out.stderr[-2000:]
    )
    # the same adapter importing it lazily passes
    text = (tmp_path / "fakefw_adapter.py").read_text()
    (tmp_path / "fakefw_adapter.py").write_text(text.replace("import dlsuite_fakefw  #", "#"))
    out = _host_side(register, tmp_path)
    assert out.returncode == 0 and out.stdout.strip().endswith("LIGHT"), out.stderr[-2000:]
