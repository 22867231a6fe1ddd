"""suite.config.resolve (precedence, errors) and suite.plan.build (tasks, ids, filters, sizes)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pytest

from suite import config, plan, schemas, settings
from suite.adapters import ADAPTERS, Adapter
from suite.adapters.pytorch.adapter import PyTorchAdapter
from suite.cli import main as cli_main
from suite.config import RunConfig, resolve
from suite.errors import ConfigError, PlanError, SuiteError
from suite.levels import load_benchmark
from suite.provenance import SOURCE_ROOT
from suite.settings import DEFAULT_DTYPES

OPERATORS = {"gemm", "conv2d", "norm", "softmax", "gelu", "attention"}


def write(tmp_path: Path, text: str, name: str = "dlsuite.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# -- resolve: precedence -----------------------------------------------------------------------


def test_defaults() -> None:
    cfg = resolve({}, env={})
    assert cfg.level == ["operator"]
    assert cfg.frameworks == ["pytorch"]
    assert cfg.benchmarks is None
    assert (cfg.backend, cfg.device, cfg.launcher) == ("auto", "auto", "auto")
    assert cfg.dtypes == DEFAULT_DTYPES == ["fp32", "bf16", "fp16"]
    assert cfg.quick is False and cfg.size_set == "full"
    assert cfg.seed == 0 and cfg.timeout is None
    assert cfg.task_timeout == settings.FULL_TIMEOUT_S
    assert cfg.measure_settings() == {"time_budget_s": settings.FULL_BUDGET_S}
    assert cfg.config_file is None and cfg.sizes == {} and cfg.peak_tflops == {}


def test_defaults_are_not_shared_between_configs() -> None:
    a = resolve({}, env={})
    a.dtypes.append("tf32")
    assert resolve({}, env={}).dtypes == ["fp32", "bf16", "fp16"]


FILE = """
[run]
level = "operator"
device = "cpu"
dtypes = ["fp32"]
quick = true
seed = 7
timeout = 50
benchmarks = ["gemm", "softmax"]

[measure]
min_samples = 5
time_budget_s = 0.25

[device.peak_tflops]
fp32 = 12.5
"""


def test_config_file_over_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, FILE)
    cfg = resolve({"config": path}, env={})
    assert cfg.config_file == path
    assert cfg.level == ["operator"]  # a string in the file becomes a list
    assert cfg.device == "cpu"
    assert cfg.dtypes == ["fp32"]
    assert cfg.quick is True and cfg.size_set == "quick"
    assert cfg.seed == 7
    assert cfg.timeout == 50 and cfg.task_timeout == 50
    assert cfg.benchmarks == ["gemm", "softmax"]
    assert cfg.frameworks == ["pytorch"]  # not in the file: default
    assert cfg.measure == {"min_samples": 5, "time_budget_s": 0.25}
    assert cfg.measure_settings() == {"time_budget_s": 0.25, "min_samples": 5}
    assert cfg.peak_tflops == {"fp32": 12.5}


def test_env_over_file(tmp_path: Path) -> None:
    path = write(tmp_path, FILE)
    env = {
        "DLSUITE_DEVICE": "cuda",
        "DLSUITE_DTYPES": "fp16, bf16",
        "DLSUITE_QUICK": "0",
        "DLSUITE_TIMEOUT": "12.5",
        "DLSUITE_BENCHMARKS": "gelu",
        "DLSUITE_LEVEL": "",  # empty: not given
    }
    cfg = resolve({"config": path}, env=env)
    assert cfg.device == "cuda"
    assert cfg.dtypes == ["fp16", "bf16"]
    assert cfg.quick is False
    assert cfg.timeout == 12.5
    assert cfg.benchmarks == ["gelu"]
    assert cfg.level == ["operator"]
    assert cfg.seed == 7  # only in the file


def test_cli_over_env_over_file(tmp_path: Path) -> None:
    path = write(tmp_path, FILE)
    env = {"DLSUITE_DEVICE": "cuda", "DLSUITE_DTYPES": "fp16", "DLSUITE_FRAMEWORKS": "pytorch"}
    cli: dict[str, Any] = {
        "config": path,
        "device": "cpu",
        "dtypes": ["tf32", "fp32"],
        "quick": None,  # not given: the file's true stands
        "seed": 11,
        "timeout": None,
    }
    cfg = resolve(cli, env=env)
    assert cfg.device == "cpu"  # CLI beats env
    assert cfg.dtypes == ["tf32", "fp32"]
    assert cfg.quick is True  # file, since neither env nor CLI gave it
    assert cfg.seed == 11  # CLI beats file
    assert cfg.timeout == 50  # file


def test_env_only_when_no_cli_and_real_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in config.ENV.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DLSUITE_DEVICE", "cpu")
    monkeypatch.setenv("DLSUITE_QUICK", "yes")
    cfg = resolve({})  # env=None reads os.environ
    assert cfg.device == "cpu" and cfg.quick is True
    assert resolve({}, env={}).device == "auto"  # an explicit env ignores os.environ


def test_cli_quick_false_overrides_env_true() -> None:
    cfg = resolve({"quick": False}, env={"DLSUITE_QUICK": "1"})
    assert cfg.quick is False


# -- resolve: errors ---------------------------------------------------------------------------


def test_toml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[run]\ndevice = cpu\n")
    with pytest.raises(ConfigError) as info:
        resolve({"config": path}, env={})
    msg = str(info.value)
    assert path in msg and "TOML" in msg and "line 2" in msg


def test_missing_config_file(tmp_path: Path) -> None:
    path = str(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match=re.escape(path)):
        resolve({"config": path}, env={})


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[run]\ncolour = 'red'\n", ["colour"]),
        ("[run]\nquick = 'yes'\n", ["run.quick"]),
        ("[run]\ndevice = 'tpu'\n", ["run.device"]),
        ("[run]\nseed = -3\n", ["run.seed"]),
        ("[measure]\nmin_samples = 0\n", ["measure.min_samples"]),
        (
            "[measure]\nmin_samples = 100\nmax_samples = 10\n",
            ["min_samples = 100", "max_samples = 10"],
        ),
        ("[measure]\nmin_samples = 1001\n", ["min_samples = 1001", "max_samples = 1000"]),
        ("[runs]\nquick = true\n", ["runs"]),
        # an unknown key names the closest known one, or lists the keys where none is close
        (
            "[run]\nframework = 'pytorch'\n",
            ["unknown key 'framework' (did you mean 'frameworks'?)"],
        ),
        ("[measure]\nrepeats = 3\n", ["unknown key 'repeats'; the keys here are max_samples,"]),
        ("colour = 1\n", [": top level: unknown key 'colour'; the keys here are device,"]),
        ("[operator.gemm]\nsizes = 3\n", ["operator.gemm.sizes"]),
    ],
)
def test_schema_errors_name_the_file_and_field(tmp_path: Path, text: str, words: list[str]) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        resolve({"config": path}, env={})
    msg = str(info.value)
    assert path in msg
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize(
    ("cli", "env", "word"),
    [
        ({"dtypes": ["fp32", "fp8"]}, {}, "fp8"),
        ({}, {"DLSUITE_DTYPES": "int4"}, "int4"),
        ({"dtypes": []}, {}, "--dtype"),
        ({"device": "tpu"}, {}, "tpu"),
        ({}, {"DLSUITE_DEVICE": "metal"}, "metal"),
        ({"backend": "podman"}, {}, "podman"),
        ({}, {"DLSUITE_BACKEND": "slurm"}, "slurm"),
        ({"timeout": 0.0}, {}, "--timeout"),
        ({"frameworks": []}, {}, "--framework"),
        ({}, {"DLSUITE_QUICK": "maybe"}, "DLSUITE_QUICK"),
        ({}, {"DLSUITE_TIMEOUT": "soon"}, "DLSUITE_TIMEOUT"),
    ],
)
def test_bad_values_raise_config_error(cli: dict[str, Any], env: dict[str, str], word: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve(cli, env=env)
    assert word in str(info.value)
    assert isinstance(info.value, SuiteError) and info.value.exit_code == 2


# -- plan.build --------------------------------------------------------------------------------


@pytest.fixture
def torch_available(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans check that the framework is installed; pretend it is, so no import is needed."""
    monkeypatch.setattr(PyTorchAdapter, "available", classmethod(lambda cls: (True, "")))


def quick_cfg(**cli: Any) -> RunConfig:
    return resolve({"quick": True, **cli}, env={})


def gpu_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *nodes: str) -> None:
    """This host's device nodes as a folder holding ``nodes`` (a GPU driver's: ``nvidia0``),
    no ``nvidia-smi`` on the PATH and no ``CUDA_VISIBLE_DEVICES``: what
    :func:`suite.devices.no_gpu_here` reads, made the same on every machine."""
    import suite.devices

    dev = tmp_path / "dev"
    dev.mkdir(exist_ok=True)
    for name in nodes or ("nvidia0",):
        (dev / name).touch()
    monkeypatch.setattr(suite.devices, "DEV", dev)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_cuda_here_without_a_gpu_is_refused_at_planning(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """--device cuda where the workers start on this host and it shows no GPU: one line
    naming the flag and the fixes (it was a failed record per task at run time). A GPU's
    device node (NVIDIA, AMD ROCm) lets it plan; a run sent to a scheduler, or ranks srun
    starts on an allocation's nodes, are not judged by this host."""
    gpu_node(monkeypatch, tmp_path, "null")  # a /dev without any GPU
    with pytest.raises(ConfigError) as err:
        plan.build(quick_cfg(device="cuda", benchmarks=["gemm"]))
    msg = str(err.value)
    assert msg.startswith("--device cuda: this machine shows no GPU"), msg
    assert "--device cpu" in msg and "--scheduler slurm" in msg
    cfg = resolve({"quick": True, "benchmarks": ["gemm"]}, env={"DLSUITE_DEVICE": "cuda"})
    with pytest.raises(ConfigError, match="^DLSUITE_DEVICE cuda: this machine shows no GPU"):
        plan.build(cfg)
    monkeypatch.setenv("SLURM_JOB_ID", "7")  # inside an allocation, where srun starts ranks
    for fine in (
        {"device": "cpu"},
        {"device": "auto"},
        {"device": "cuda", "level": ["distributed"], "benchmarks": ["allreduce"],
         "launcher": "srun", "world_size": 2},
        # horovodrun -H over the allocation's hosts (salloc's shell on a login node)
        {"device": "cuda", "level": ["distributed"], "benchmarks": ["allreduce"],
         "frameworks": ["horovod"], "launcher": "horovodrun", "nodes": 2, "world_size": 4,
         "backend": "venv", "envs_dir": str(tmp_path)},
    ):  # fmt: skip
        kw = {"benchmarks": ["gemm"], **fine}
        assert plan.build(quick_cfg(**kw)), fine
    monkeypatch.delenv("SLURM_JOB_ID")
    # submitted from here to a site's GPU partition: not this host's GPUs
    site = str(SOURCE_ROOT / "sites" / "example-a100.toml")
    assert plan.build(quick_cfg(device="cuda", benchmarks=["gemm"], scheduler="slurm", site=site))
    # NVIDIA Jetson (Tegra): JetPack 5's nvhost nodes, JetPack 6's nvgpu/ (neither has nvidia0)
    for node in ("nvidia0", "kfd", "nvhost-ctrl-gpu", "nvgpu"):
        (tmp_path / "dev" / node).touch()
        assert plan.build(quick_cfg(device="cuda", benchmarks=["gemm"]))
        (tmp_path / "dev" / node).unlink()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    (tmp_path / "dev" / "nvidia0").touch()  # a GPU, hidden
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES='' hides every GPU"):
        plan.build(quick_cfg(device="cuda", benchmarks=["gemm"]))


def test_quick_plan_covers_every_operator_and_dtype(torch_available: None) -> None:
    cfg = quick_cfg()
    tasks = plan.build(cfg)
    assert {t.benchmark for t in tasks} == OPERATORS
    assert {(t.benchmark, t.dtype) for t in tasks} == {
        (b, d) for b in OPERATORS for d in DEFAULT_DTYPES
    }
    specs = [s for b in OPERATORS for s in load_benchmark("operator", b).sizes("quick")]
    # the kit's cases (every word's backward, a grouped convolution) are not the quick plan's:
    # it stays the first contact's 24 tasks (SizeSpec.kit)
    assert len(tasks) == sum(not s.kit for s in specs) * len(DEFAULT_DTYPES) == 24
    for t in tasks:
        assert t.level == "operator" and t.framework == "pytorch"
        assert t.size_set == "quick" and t.source.startswith("quick")
        assert t.world_size == 1 and t.seed == 0 and t.device == "auto" and t.backend == "local"
        assert t.timeout_s == settings.QUICK_TIMEOUT_S
        assert t.measure == {"time_budget_s": settings.QUICK_BUDGET_S}
        assert load_benchmark("operator", t.benchmark).validate(t.params) == t.params
    conv_dirs = Counter(t.params["direction"] for t in tasks if t.benchmark == "conv2d")
    assert conv_dirs["forward"] == conv_dirs["backward"] == len(DEFAULT_DTYPES)
    # every operator has a backward size (its vjp) in the kit's cases
    for b in OPERATORS:
        kit = [s for s in load_benchmark("operator", b).sizes("quick") if s.kit or b == "conv2d"]
        assert any(s.params.get("direction") == "backward" for s in kit), b


@pytest.mark.parametrize("quick", [True, False])
def test_task_ids_deterministic_distinct_and_well_formed(
    torch_available: None, quick: bool
) -> None:
    a = plan.build(resolve({"quick": quick}, env={}))
    b = plan.build(resolve({"quick": quick}, env={}))
    ids = [t.task_id for t in a]
    assert ids == [t.task_id for t in b]
    dupes = [i for i, n in Counter(ids).items() if n > 1]
    assert not dupes, f"{len(dupes)} task ids planned twice, e.g. {dupes[:2]}"
    for t in a:
        assert re.fullmatch(r"[A-Za-z0-9_.-]+", t.task_id)
        assert t.task_id.startswith(f"operator-{t.benchmark}-pytorch-{t.dtype}-")


def test_task_id_depends_on_identity_only(torch_available: None) -> None:
    base = {t.task_id for t in plan.build(quick_cfg(dtypes=["fp32"]))}
    assert {t.task_id for t in plan.build(quick_cfg(dtypes=["fp32"], seed=1))}.isdisjoint(base)
    assert {t.task_id for t in plan.build(quick_cfg(dtypes=["fp32"], device="cpu"))}.isdisjoint(
        base
    )
    # the timeout is not part of what is measured: same ids
    assert {t.task_id for t in plan.build(quick_cfg(dtypes=["fp32"], timeout=5.0))} == base


def test_benchmark_filter(torch_available: None) -> None:
    tasks = plan.build(quick_cfg(benchmarks=["gemm", "softmax"], dtypes=["fp32"]))
    assert {t.benchmark for t in tasks} == {"gemm", "softmax"}
    assert {t.dtype for t in tasks} == {"fp32"}
    env_cfg = resolve({"quick": True}, env={"DLSUITE_BENCHMARKS": "attention"})
    assert {t.benchmark for t in plan.build(env_cfg)} == {"attention"}


def test_unknown_benchmark(torch_available: None) -> None:
    with pytest.raises(ConfigError) as info:
        plan.build(quick_cfg(benchmarks=["gemm", "gemmm"]))
    assert "gemmm" in str(info.value) and isinstance(info.value, SuiteError)


def test_unknown_level(torch_available: None) -> None:
    with pytest.raises(ConfigError) as info:
        plan.build(quick_cfg(level=["bogus"]))
    assert "bogus" in str(info.value) and isinstance(info.value, SuiteError)


def test_level_all_is_every_implemented_level(torch_available: None) -> None:
    from suite.levels import LEVELS

    tasks = plan.build(quick_cfg(level=["all"], dtypes=["fp32"]))
    assert {t.level for t in tasks} == set(LEVELS)
    assert {t.benchmark for t in tasks if t.level == "operator"} == OPERATORS


def test_unknown_framework(torch_available: None) -> None:
    with pytest.raises(ConfigError) as info:
        plan.build(quick_cfg(frameworks=["caffe"]))
    assert "caffe" in str(info.value) and isinstance(info.value, SuiteError)


def test_framework_not_installed_is_plan_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        PyTorchAdapter, "available", classmethod(lambda cls: (False, "torch is not installed"))
    )
    with pytest.raises(PlanError) as info:
        plan.build(quick_cfg(backend="local"))
    assert "pytorch" in str(info.value) and isinstance(info.value, ConfigError)
    assert "--backend venv" in str(info.value)  # the way out is named
    # --backend auto: the framework runs in its own environment instead
    tasks = plan.build(quick_cfg(backend="auto"))
    assert tasks and {t.backend for t in tasks} == {"venv"}


def test_framework_not_installed_names_the_command_that_installs_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The way to install it here is the recipe's pins (every framework has a recipe; not every
    one has a ``dlsuite[<name>]`` extra: numpy has none), or its distribution without one."""
    from suite.adapters.numpy.adapter import NumPyAdapter

    monkeypatch.setattr(
        NumPyAdapter, "available", classmethod(lambda cls: (False, "numpy is not installed"))
    )
    with pytest.raises(PlanError) as info:
        plan.build(quick_cfg(backend="local", frameworks=["numpy"]))
    message = str(info.value)
    assert f"pip install -r {SOURCE_ROOT / 'containers' / 'numpy' / 'requirements.txt'}" in message
    assert "dlsuite[" not in message
    monkeypatch.setenv("DLSUITE_CONTAINERS_DIR", str(tmp_path))  # no recipe for it there
    with pytest.raises(PlanError) as info:
        plan.build(quick_cfg(backend="local", frameworks=["numpy"]))
    assert "(pip install numpy)" in str(info.value)


def test_an_entry_that_cannot_be_imported_names_the_module_not_an_extra() -> None:
    from suite.registry import Registry

    reg: Registry[type] = Registry("framework")
    reg.register("nofw", "dlsuite_no_such_module:Adapter")
    with pytest.raises(ConfigError) as info:
        reg.load("nofw")
    message = str(info.value)
    assert "importing dlsuite_no_such_module failed" in message, message
    assert "dlsuite[" not in message  # no extra is promised that may not exist


def test_backend_auto_runs_importable_frameworks_here() -> None:
    tasks = plan.build(quick_cfg(backend="auto", frameworks=["pytorch"]))
    assert {t.backend for t in tasks} == {"local"}


def test_launcher_auto_is_the_frameworks_own(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = quick_cfg(level=["distributed"], world_size=2, launcher="auto")
    assert {t.launcher for t in plan.build(cfg) if t.world_size > 1} == {"torchrun"}
    assert plan.resolve_launcher(cfg, "numpy", 2) == "spawn"
    assert plan.resolve_launcher(cfg, "pytorch", 1) == "single"
    cfg.launcher = "mpirun"
    assert plan.resolve_launcher(cfg, "pytorch", 2) == "mpirun"


def test_several_nodes_need_srun(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "42")  # inside an allocation
    dist = {"level": ["distributed"], "world_size": 4, "nodes": 2}
    with pytest.raises(ConfigError, match="--nodes 2.*srun"):
        resolve({**dist, "launcher": "torchrun"}, env={})
    assert resolve({**dist, "launcher": "srun"}, env={}).nodes == 2
    assert resolve({**dist, "launcher": "horovodrun"}, env={}).nodes == 2


def test_several_nodes_under_slurm_name_the_launcher(tmp_path: Path) -> None:
    """`dlsuite run --site S --nodes 2 --launcher torchrun`: the run goes to Slurm, yet the
    error said "runs over several nodes go through Slurm in this version"."""
    site = tmp_path / "two.toml"
    site.write_text('scheduler = "slurm"\npartition = "p"\n[partitions.p]\nnodes = 2\n')
    dist = {"level": ["distributed"], "world_size": 2, "nodes": 2, "site": str(site)}
    with pytest.raises(ConfigError) as err:
        resolve({**dist, "launcher": "torchrun"}, env={})
    assert str(err.value) == (
        "--nodes 2: --launcher torchrun starts every rank on one node; use --launcher "
        "horovodrun or srun (ranks on each node of the job), or --nodes 1"
    )
    assert resolve({**dist, "launcher": "srun"}, env={}).scheduler == "slurm"


def test_srun_and_horovodrun_over_nodes_need_an_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    """`dlsuite run --level distributed --launcher srun` on a machine outside any allocation:
    every task started, each rank failed ("srun: fatal: Could not establish a configuration
    source"), a failed record per task and exit 1. Now it is bad input before anything runs;
    under --scheduler slurm the launcher runs inside the job's allocation."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    dist = {"level": ["distributed"], "world_size": 2}
    with pytest.raises(ConfigError, match=r"--launcher srun: .*SLURM_JOB_ID is unset.*salloc"):
        resolve({**dist, "launcher": "srun"}, env={})
    with pytest.raises(ConfigError, match=r"--launcher horovodrun: horovodrun on 2 nodes"):
        resolve({**dist, "launcher": "horovodrun", "nodes": 2}, env={})
    assert resolve({**dist, "launcher": "horovodrun"}, env={}).launcher == "horovodrun"
    assert resolve({**dist, "launcher": "torchrun"}, env={}).launcher == "torchrun"
    # the other levels run one rank whatever --launcher says
    assert resolve({"level": ["operator"], "launcher": "srun"}, env={}).launcher == "srun"
    assert resolve({"level": ["training"], "launcher": "srun"}, env={}).launcher == "srun"
    # but the training level's loader at --world-size N starts its ranks with it
    with pytest.raises(ConfigError, match=r"--launcher srun: .*SLURM_JOB_ID is unset"):
        resolve({"level": ["training"], "world_size": 2, "launcher": "srun"}, env={})
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert resolve({**dist, "launcher": "srun"}, env={}).launcher == "srun"


def test_no_environment_recipe_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DLSUITE_CONTAINERS_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=r"pytorch.*requirements\.txt"):
        plan.build(quick_cfg(backend="venv"))


def test_custom_sizes_from_config(tmp_path: Path, torch_available: None) -> None:
    path = write(
        tmp_path,
        """
[run]
quick = true
dtypes = ["fp32"]

[operator.gemm]
sizes = [{m = 8, n = 16, k = 4}, {m = 2, n = 2, k = 2}]

[operator.conv2d]
sizes = [{batch = 1, in_channels = 2, height = 5, width = 5, out_channels = 2, kernel = 3}]
""",
    )
    cfg = resolve({"config": path}, env={})
    tasks = plan.build(cfg)
    gemm = [t for t in tasks if t.benchmark == "gemm"]
    assert [t.params for t in gemm] == [{"m": 8, "n": 16, "k": 4}, {"m": 2, "n": 2, "k": 2}]
    assert all(t.size_set == "custom" for t in gemm)
    conv = [t for t in tasks if t.benchmark == "conv2d"]
    assert len(conv) == 1 and conv[0].size_set == "custom"
    assert conv[0].params["direction"] == "forward" and conv[0].params["padding"] == 0
    others = [t for t in tasks if t.benchmark not in ("gemm", "conv2d")]
    assert others and all(t.size_set == "quick" for t in others)


def test_sizes_of_a_benchmark_left_out_are_said_not_dropped(
    tmp_path: Path, torch_available: None
) -> None:
    """[operator.softmax] sizes with ``benchmarks = ["gemm"]`` planned gemm alone and said
    nothing; now one plan note names the section, and --benchmark picking one of several
    sections names the others. A section of a chosen benchmark gives no note."""
    path = write(
        tmp_path,
        """
[run]
quick = true
dtypes = ["fp32"]
benchmarks = ["gemm"]

[operator.gemm]
sizes = [{m = 3, n = 5, k = 7}]

[operator.softmax]
sizes = [{rows = 11, cols = 13}]

[operator.gelu]
sizes = [{rows = 1, cols = 2}]
""",
    )
    cfg = resolve({"config": path}, env={})
    tasks = plan.build(cfg)
    assert [t.benchmark for t in tasks] == ["gemm"]
    [note] = [n for n in cfg.plan_notes if "not run" in n]
    assert "[operator.gelu], [operator.softmax]" in note and "[operator.gemm]" not in note
    assert "benchmarks = gemm" in note, note
    cfg = resolve({"config": path, "benchmarks": ["softmax", "gelu", "gemm"]}, env={})
    assert len(plan.build(cfg)) == 3 and not [n for n in cfg.plan_notes if "not run" in n]
    cfg = resolve({"config": path, "benchmarks": ["softmax"]}, env={})
    plan.build(cfg)
    [note] = [n for n in cfg.plan_notes if "not run" in n]
    assert "[operator.gelu], [operator.gemm] are not run" in note and "--benchmark softmax" in note


@pytest.mark.parametrize(
    ("sizes", "words"),
    [
        ("[{m = 0, n = 4, k = 4}]", ["sizes[0]", "m"]),
        ("[{m = 4, n = 4, k = 4}, {m = 4, n = 4, k = -1}]", ["sizes[1]", "k"]),
        ("[{m = 4, n = 4, k = 4, q = 1}]", ["sizes[0]", "q"]),
        ("[{m = 4, n = 4}]", ["sizes[0]", "k"]),
        ("[{m = true, n = 4, k = 4}]", ["sizes[0]", "m"]),
    ],
)
def test_bad_custom_size(
    tmp_path: Path, torch_available: None, sizes: str, words: list[str]
) -> None:
    path = write(tmp_path, f"[operator.gemm]\nsizes = {sizes}\n")
    cfg = resolve({"config": path, "quick": True}, env={})
    with pytest.raises(ConfigError) as info:
        plan.build(cfg)
    msg = str(info.value)
    assert path in msg and "operator.gemm" in msg
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize(
    ("level", "bench", "size", "world"),
    [
        ("network", "train", '{network = "resnet18", batch = 2, resolution = 40, classes = 1}', 1),
        ("network", "agreement", '{network = "mlp", batch = 3, features = 9, classes = 1}', 1),
        ("distributed", "data_parallel", '{network = "mlp", batch = 6, classes = 1}', 2),
        ("distributed", "strategies", '{network = "mlp", batch = 8, classes = 1}', 2),
    ],
)
def test_one_class_is_refused_where_the_network_trains(
    tmp_path: Path, torch_available: None, level: str, bench: str, size: str, world: int
) -> None:
    """A size with classes = 1 planned a training whose softmax cross-entropy is 0 whatever
    the weights: every framework's train task was skipped at run time, and agreement compared
    first updates that were all zero."""
    path = write(tmp_path, f"[{level}.{bench}]\nsizes = [{size}]\n")
    cfg = resolve(
        {"config": path, "level": [level], "benchmarks": [bench], "world_size": world}, env={}
    )
    with pytest.raises(ConfigError, match=r"classes: the .* needs 2 classes or more") as info:
        plan.build(cfg)
    assert f"{level}.{bench}" in str(info.value) and "set classes >= 2" in str(info.value)
    # inference has no loss: one logit per sample is a model worth timing
    path = write(tmp_path, '[network.infer]\nsizes = [{network = "mlp", batch = 2, classes = 1}]\n')
    cfg = resolve({"config": path, "level": ["network"], "benchmarks": ["infer"]}, env={})
    infer = plan.build(cfg)
    assert infer and {t.params["classes"] for t in infer} == {1}


def test_agreement_records_the_eager_nchw_network_it_runs(
    tmp_path: Path, torch_available: None
) -> None:
    """run_agreement builds every network eager and NCHW: a config size's default
    channels_last (true) and --compile were written into its records all the same."""
    path = write(
        tmp_path,
        "[network.agreement]\n"
        'sizes = [{network = "resnet18", batch = 3, resolution = 40, classes = 5, width = 8}]\n',
    )
    cli = {"config": path, "level": ["network"], "dtypes": ["fp32"], "compile": True}
    tasks = plan.build(resolve({**cli, "benchmarks": ["agreement", "train"]}, env={}))
    got = {t.benchmark: (t.params["channels_last"], t.params["compile"]) for t in tasks}
    assert got["agreement"] == (False, False)
    # --compile still reaches train's built-in sizes (the config's agreement size is its own)
    assert got["train"] == (True, True)
    for field in ("channels_last", "compile"):
        path = write(
            tmp_path,
            f'[network.agreement]\nsizes = [{{network = "mlp", batch = 3, {field} = true}}]\n',
        )
        cfg = resolve({"config": path, "level": ["network"], "benchmarks": ["agreement"]}, env={})
        with pytest.raises(ConfigError, match=rf"agreement\.{field}: .*drop it"):
            plan.build(cfg)


def test_task_documents_validate(tmp_path: Path, torch_available: None) -> None:
    path = write(
        tmp_path,
        "[measure]\nmin_samples = 4\n[device.peak_tflops]\nbf16 = 100.0\n"
        "[operator.softmax]\nsizes = [{rows = 4, cols = 8}]\n",
    )
    tasks = plan.build(resolve({"config": path, "quick": True}, env={}))
    for t in tasks:
        doc = t.document(run_id="run-1", record_path=f"records/{t.task_id}.json", provenance={})
        schemas.validate("task", doc)
        assert doc["task_id"] == t.task_id
        assert doc["measure"] == {"time_budget_s": settings.QUICK_BUDGET_S, "min_samples": 4}
        assert doc["peak_tflops"] == {"bf16": 100.0}
    plain = plan.build(quick_cfg(benchmarks=["gemm"]))[0]
    doc = plain.document(run_id="r", record_path="r.json", provenance={})
    assert "peak_tflops" not in doc
    schemas.validate("task", doc)


# -- a process group of one rank (make gpu-check's NCCL step) ----------------------------------


def test_collectives_at_one_rank_need_a_named_backend() -> None:
    with pytest.raises(ConfigError, match="--dist-backend nccl"):
        plan.build(quick_cfg(level=["distributed"], world_size=1, benchmarks=["allreduce"]))


def test_one_rank_without_a_backend_names_the_fix_each_framework_takes(tmp_path: Path) -> None:
    """``--framework mxnet --world-size 1`` said "add --dist-backend nccl (gloo on a CPU)",
    and that was refused next ("mxnet has no nccl communication ...; use --world-size 2"):
    the first message names the fix that plans, for the frameworks chosen."""
    venv = {"level": ["distributed"], "backend": "venv", "envs_dir": str(tmp_path),
            "world_size": 1, "benchmarks": ["allgather"]}  # fmt: skip
    expect = {
        ("mxnet",): "use --world-size 2 (--framework mxnet makes no process group of one "
        "rank: it takes no --dist-backend)",
        ("jax", "mxnet"): "use --world-size 2 (--framework mxnet makes no",
        ("pytorch", "jax"): "add --dist-backend nccl (gloo on a CPU)",
        ("tensorflow",): "add --dist-backend nccl on a GPU (on a CPU, use --world-size 2)",
        ("horovod",): "add --dist-backend gloo",
        ("pytorch", "tensorflow", "horovod"): "the chosen frameworks share no --dist-backend "
        "(pytorch: gloo, mpi, nccl; tensorflow: nccl; horovod: gloo): run each apart",
    }
    for fws, fix in expect.items():
        with pytest.raises(ConfigError) as caught:
            plan.build(quick_cfg(frameworks=list(fws), **venv))
        assert "need at least 2 ranks, or a process group of one rank to run the framework's " \
            f"path alone: {fix}" in str(caught.value), fws  # fmt: skip
    # each fix named plans
    plan.build(quick_cfg(frameworks=["mxnet"], **{**venv, "world_size": 2}))
    plan.build(quick_cfg(frameworks=["horovod"], dist_backend="gloo", **venv))
    plan.build(quick_cfg(frameworks=["tensorflow"], dist_backend="nccl", **venv))
    plan.build(quick_cfg(frameworks=["pytorch", "jax"], dist_backend="gloo", **venv))


def test_one_rank_group_is_planned_with_its_backend_and_is_part_of_the_identity() -> None:
    cfg = quick_cfg(level=["distributed"], world_size=1, dist_backend="gloo",
                    benchmarks=["allreduce", "data_parallel", "strategies"])  # fmt: skip
    tasks = plan.build(cfg)
    assert tasks and all(t.world_size == 1 and t.one_rank_group for t in tasks)
    doc = tasks[0].document(run_id="r", record_path="/tmp/x", provenance={})
    schemas.validate("task", doc)
    assert doc["one_rank_group"] is True and doc["dist_backend"] == "gloo"
    assert all("-w1-" in t.task_id for t in tasks)
    # the 1-rank scaling baseline of a 2-rank run stays a plain one-process task
    two = plan.build(quick_cfg(level=["distributed"], world_size=2, benchmarks=["data_parallel"]))
    base = [t for t in two if t.world_size == 1]
    assert base and not any(t.one_rank_group for t in base)
    assert {t.task_id for t in base}.isdisjoint({t.task_id for t in tasks})


def test_the_strategies_that_run_at_one_rank() -> None:
    from suite import strategies as S

    one = {n for n, s in S.STRATEGIES.items() if S.runs_at_one_rank(s)}
    assert {"allreduce", "fp16", "bf16", "powersgd"} <= one
    assert one.isdisjoint({"ps-sync", "ps-async", "ssp", "local-sgd", "pipeline", "2bit"})


def test_the_feed_trains_at_the_dtype_asked_for() -> None:
    def feed_dtypes(**cli: Any) -> set[str]:
        cfg = quick_cfg(level=["training"], benchmarks=["feed"], **cli)
        return {t.dtype for t in plan.build(cfg)}

    assert feed_dtypes() == {"fp32"}  # the default dtypes hold fp32
    assert feed_dtypes(dtypes=["bf16"]) == {"bf16"}


def test_telemetry_off_reaches_the_task() -> None:
    cfg = quick_cfg(benchmarks=["gemm"], dtypes=["fp32"], telemetry=False)
    doc = plan.build(cfg)[0].document(run_id="r", record_path="/tmp/x", provenance={})
    schemas.validate("task", doc)
    assert doc["telemetry"]["sampling"] is False


def test_device_decode_is_declared_per_adapter() -> None:
    from suite.adapters import ADAPTERS

    assert PyTorchAdapter.loader_declined("folder", "device") == ""
    numpy = ADAPTERS.load("numpy")
    assert "no decoder on the device" in numpy.loader_declined("folder", "device")
    assert PyTorchAdapter.loader_declined("tfrecord", "host")  # still its own reason


def test_a_transform_the_loaders_do_not_run_is_declined_on_the_host() -> None:
    """MXNet's loaders always crop (``unsupported_transforms``): the decode-only transform is
    a skipped task with the reason, read from the class; its train transform runs."""
    from suite.adapters import ADAPTERS
    from suite.levels.training.loader import loader_declined

    mxnet = ADAPTERS.load("mxnet")
    why = loader_declined(mxnet, "recordio", "host", "decode")
    assert why.startswith("mxnet: ImageRecordIter always crops"), why
    assert loader_declined(mxnet, "recordio", "host", "train") == ""
    assert loader_declined(PyTorchAdapter, "folder", "host", "decode") == ""
    # the format's own reason comes first
    assert "TFRecord" in loader_declined(mxnet, "tfrecord", "host", "decode")


def _user_model(path: Path, batch: str | int = "N") -> str:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((6, 8)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "w2")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])], [w1, w2],
    )  # fmt: skip
    onnx.save(helper.make_model(graph), str(path))
    return str(path)


def test_compile_reaches_a_users_model_as_it_reaches_the_zoo(tmp_path: Path) -> None:
    """``--model FILE --compile`` planned ``compile: false`` train and infer tasks: the user
    asked for torch.compile and got an eager run labelled as plain, nothing said. Now the
    flag reaches the file's tasks and their label says ``compiled``."""
    path = _user_model(tmp_path / "mine.onnx")
    eager = plan.build(quick_cfg(level=["network"], model=path, batch=[3]))
    tasks = plan.build(quick_cfg(level=["network"], model=path, batch=[3], compile=True))
    assert {t.benchmark for t in tasks} == {"train", "infer", "agreement"}
    assert all(t.params["compile"] is (t.benchmark != "agreement") for t in tasks)
    assert all(t.params["compile"] is False for t in eager)
    timed = {t.task_id for t in tasks if t.benchmark != "agreement"}
    assert timed.isdisjoint({t.task_id for t in eager})
    label = load_benchmark("network", "train").label(
        next(t for t in tasks if t.benchmark == "train").params
    )
    assert label == "mine.onnx b3 compiled"


def test_xla_or_compile_without_their_level_is_refused() -> None:
    """``--level network --xla`` (XLA for the networks was meant: that is --compile) and
    ``--level operator --compile`` planned runs without the flag, nothing said; each is now
    one error naming the flag and the level that takes it (exit 2 at the CLI)."""
    with pytest.raises(ConfigError, match=r"^--xla: .*the network level would run without it "
                       r"\(add --level operator, or drop --xla\)$"):  # fmt: skip
        plan.build(quick_cfg(level=["network"], xla=True))
    with pytest.raises(ConfigError, match=r"^--compile: .*the operator level would run without "
                       r"it \(add --level network, or drop --compile\)$"):  # fmt: skip
        plan.build(quick_cfg(level=["operator"], compile=True))
    for level in (["operator", "network"], ["all"]):
        cfg = quick_cfg(level=level, xla=True, compile=True, frameworks=["tensorflow"],
                        benchmarks=["gemm", "infer"], networks=["mlp"], dtypes=["fp32"])  # fmt: skip
        tasks = plan.build(cfg)
        assert {(t.benchmark, t.xla, t.params.get("compile")) for t in tasks} == {
            ("gemm", True, None), ("infer", False, True)
        }  # fmt: skip


def test_agreement_compares_a_users_model(tmp_path: Path) -> None:
    """``--model FILE --benchmark train,agreement`` planned the train tasks alone, agreement
    left out with nothing said (and ``--benchmark agreement`` alone: "the selection matches no
    task"); the file is now compared across the frameworks as the zoo is, eager (no compile),
    its learning rate the worker's."""
    path = _user_model(tmp_path / "mine.onnx")
    cfg = quick_cfg(level=["network"], model=path, batch=[3], compile=True,
                    benchmarks=["train", "agreement"], frameworks=["numpy", "pytorch"],
                    dtypes=["fp32"])  # fmt: skip
    tasks = plan.build(cfg)
    agree = [t for t in tasks if t.benchmark == "agreement"]
    assert sorted(t.framework for t in agree) == ["numpy", "pytorch"]
    for t in agree:
        assert t.params["network"] == "onnx" and t.params["batch"] == 3
        assert t.params["compile"] is False and t.params["lr"] is None
    assert all(t.params["compile"] for t in tasks if t.benchmark == "train")


def test_a_users_model_trains_data_parallel_and_the_sweeps_stay(tmp_path: Path) -> None:
    """--model with the distributed level: data_parallel trains the file at each --batch per
    rank (weak scaling, the 1-rank baseline too), the collectives' sweeps run as they would
    (the projection fits the links to them), strategies (the zoo's networks cut and
    compressed) do not run."""
    path = _user_model(tmp_path / "mine.onnx")
    cfg = quick_cfg(level=["distributed"], world_size=2, model=path, batch=[2, 5])
    tasks = plan.build(cfg)
    dp = [t for t in tasks if t.benchmark == "data_parallel"]
    assert sorted((t.world_size, t.params["batch"]) for t in dp) == [(1, 2), (1, 5), (2, 2), (2, 5)]
    for t in dp:
        assert t.params["network"] == "onnx" and t.params["model"] == str(Path(path).resolve())
        assert t.params["scaling"] == "weak" and t.params["lr"] is None  # the range check's
    assert "strategies" not in {t.benchmark for t in tasks}
    assert "allreduce" in {t.benchmark for t in tasks}
    assert (
        load_benchmark("distributed", "data_parallel").label(dp[0].params).startswith("mine.onnx")
    )
    # a config size names it as the network level's does, and gives the rate
    cfg = write(tmp_path, f"""
[run]
level = ["distributed"]
benchmarks = ["data_parallel"]
[distributed.data_parallel]
sizes = [{{ network = "onnx", model = "{path}", batch = 3, lr = 0.01 }}]
""")  # fmt: skip
    tasks = plan.build(resolve({"config": cfg, "quick": True}, env={}))
    assert {(t.world_size, t.params["lr"], t.params["scaling"]) for t in tasks} == {
        (1, 0.01, "weak"),
        (2, 0.01, "weak"),
    }
    # a file it names is read when the plan is made, as --model's is
    missing = write(tmp_path, Path(cfg).read_text().replace("mine.onnx", "gone.onnx"), "gone.toml")
    with pytest.raises(ConfigError, match="gone.onnx: no such file"):
        plan.build(resolve({"config": missing, "quick": True}, env={}))
    # a file fixed at batch 1 runs at 1; another --batch is the network level's one error
    fixed = _user_model(tmp_path / "b1.onnx", batch=1)
    dp = plan.build(quick_cfg(level=["distributed"], world_size=2, model=fixed,
                              benchmarks=["data_parallel"]))  # fmt: skip
    assert {t.params["batch"] for t in dp} == {1}
    with pytest.raises(ConfigError, match="--batch: b1.onnx has a fixed batch of 1"):
        plan.build(quick_cfg(level=["distributed"], world_size=2, model=fixed, batch=[4]))
    # the operator level would still run its own operators: refused, naming both levels
    with pytest.raises(ConfigError, match="--level network or --level distributed"):
        config.check(quick_cfg(level=["operator"], model=path))


@pytest.mark.parametrize(
    ("where", "said"),
    [("cli", "--benchmark 'gemmm'"), ("env", "DLSUITE_BENCHMARKS 'gemmm'"),
     ("file", "[run] benchmarks = 'gemmm'")],
)  # fmt: skip
def test_an_unknown_benchmark_is_named_where_it_was_given(
    tmp_path: Path, where: str, said: str
) -> None:
    """A misspelt benchmark in the config file was reported as "--benchmark 'gemmm'", a flag
    the user never typed: the error names the file's key (or the variable) it came from."""
    cli: dict[str, Any] = {"benchmarks": ["gemmm"]} if where == "cli" else {}
    env = {"DLSUITE_BENCHMARKS": "gemmm"} if where == "env" else {}
    if where == "file":
        cli["config"] = write(tmp_path, '[run]\nbenchmarks = ["gemmm"]\n')
    with pytest.raises(ConfigError, match="no such benchmark") as info:
        plan.build(resolve(cli, env=env))
    assert said in str(info.value)


def test_more_ranks_than_cores_here_is_said_at_plan_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """4 CPU ranks on 2 cores: the plan says the run is oversubscribed before it runs (the
    user saw 183% efficiency and nothing else); 2 ranks on 2 cores and a GPU run say nothing."""
    import suite.cpuinfo

    monkeypatch.setattr(suite.cpuinfo, "usable_cores", lambda: 2)
    cfg = quick_cfg(level=["distributed"], world_size=4, device="cpu", benchmarks=["allreduce"])
    plan.build(cfg)
    (note,) = [n for n in cfg.plan_notes if "oversubscribed" in n]
    assert "4 ranks on this machine's 2 usable cores" in note and "--world-size 2" in note
    gpu_node(monkeypatch, tmp_path)  # the cuda run is planned as on a GPU machine
    for kw in ({"world_size": 2, "device": "cpu"}, {"world_size": 4, "device": "cuda"}):
        cfg = quick_cfg(level=["distributed"], benchmarks=["allreduce"], **kw)
        plan.build(cfg)
        assert not [n for n in cfg.plan_notes if "oversubscribed" in n], kw


class _GeluDeclaredNotWrittenAdapter(Adapter):
    """A new adapter that declares ``gelu`` and forgot to write it."""

    name = "halffw"
    module = "numpy"  # importable here: the plan's availability check passes
    distribution = "numpy"
    words = frozenset({"matmul", "gelu"})

    def setup(self, device: str) -> Any:
        raise NotImplementedError

    def from_numpy(self, x: Any, dtype: str, *, requires_grad: bool = False) -> Any:
        return x

    def to_numpy(self, t: Any) -> Any:
        return t

    def matmul(self, a: Any, b: Any) -> Any:
        return a @ b


class _MisspeltWordAdapter(_GeluDeclaredNotWrittenAdapter):
    name = "typofw"
    words = frozenset({"matmull"})


def test_declared_words_are_checked_against_the_class_at_plan_time(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A declared word the class does not override (a failed record "NotImplementedError: ")
    and a misspelt word (its benchmarks skipped without a word) are one line and exit 2
    before anything runs."""
    ADAPTERS.names()  # entry points scanned before the registry is patched
    monkeypatch.setattr(ADAPTERS, "_targets", {**ADAPTERS._targets,
                        "halffw": f"{__name__}:_GeluDeclaredNotWrittenAdapter",
                        "typofw": f"{__name__}:_MisspeltWordAdapter"})  # fmt: skip
    monkeypatch.setattr(ADAPTERS, "_loaded", dict(ADAPTERS._loaded))
    with pytest.raises(PlanError, match=r"^halffw declares 'gelu' but does not override "
                       r"Adapter\.gelu; implement it, or take 'gelu' out of words$"):  # fmt: skip
        plan.build(quick_cfg(frameworks=["halffw"], backend="local"))
    code = cli_main(["run", "--quick", "--framework", "typofw", "--backend", "local", "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "typofw declares unknown word 'matmull' in words (known: attention," in err[0], err
    for name in ADAPTERS.names():  # the shipped adapters pass
        if name not in ("halffw", "typofw"):
            assert ADAPTERS.load(name).words_problem() == "", name


def test_a_word_the_adapter_does_not_override_names_itself_and_the_adapter() -> None:
    adapter = _GeluDeclaredNotWrittenAdapter()
    with pytest.raises(NotImplementedError, match=r"^halffw does not implement the word 'gelu'; "
                       r"it declares 'gelu' in words, so it must override Adapter\.gelu$"):  # fmt: skip
        adapter.gelu(None)
    with pytest.raises(NotImplementedError, match=r"^halffw does not implement Adapter\.forward "
                       r"\(the word 'network'\)$"):  # fmt: skip
        adapter.forward(None, None)


class _Fp64WordDtypeAdapter(_GeluDeclaredNotWrittenAdapter):
    name = "fp64fw"
    words = frozenset({"matmul"})
    unsupported_word_dtypes: ClassVar[dict[str, dict[str, str]]] = {
        "matmul": {"fp64": "no double GEMM on this device"}
    }


def test_an_unsupported_word_dtype_that_is_no_task_dtype_says_so() -> None:
    """fp64 in ``unsupported_word_dtypes`` (the kit asserted ``('matmul', 'fp64', '...')``):
    one line saying fp64 is no task dtype, from the planner and the kit alike."""
    assert _Fp64WordDtypeAdapter.words_problem() == (
        "fp64fw: unsupported_word_dtypes['matmul'] names 'fp64', which is not a task dtype "
        "(those are fp32, tf32, bf16, fp16; fp64 is the references' internal precision, never "
        "a task's); remove it"
    )
    fp32 = {"matmul": {"fp32": "a reason long enough"}}
    assert "take 'matmul' out of words" in type("F", (_Fp64WordDtypeAdapter,), {
        "unsupported_word_dtypes": fp32})().words_problem()  # fmt: skip


def test_a_launcher_the_frameworks_environment_cannot_run_is_refused(tmp_path: Path) -> None:
    """`dlsuite run --level distributed --framework pytorch --launcher horovodrun` where Horovod
    is not installed, or `--framework jax --launcher torchrun` (JAX's environment has no
    torch): every task ran, each rank died ("No module named 'horovod'"), a failed record per
    task, exit 1. Now one error names the launcher, what it needs and the launcher to use."""
    import importlib.metadata
    import subprocess
    import sys

    from suite import envs

    try:
        importlib.metadata.version("horovod")
        pytest.skip("Horovod is installed in this interpreter: horovodrun can start ranks here")
    except importlib.metadata.PackageNotFoundError:
        pass  # this test's premise: no Horovod here
    dist = {"level": ["distributed"], "frameworks": ["numpy"], "world_size": 2}
    with pytest.raises(
        PlanError,
        match=r"--launcher horovodrun starts ranks with horovod, "
        r"which this interpreter .* --framework numpy .* --launcher auto \(spawn",
    ):
        plan.build(quick_cfg(**dist, launcher="horovodrun", backend="local"))
    assert plan.build(quick_cfg(**dist, launcher="torchrun", backend="local"))  # torch is here
    assert plan.build(quick_cfg(**dist, launcher="spawn", backend="local"))
    # numpy's own environment, built (a bare venv with the marker): no torch in it
    env = envs.env_for("numpy", tmp_path)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env.path)], check=True)
    (env.path / envs.MARKER).write_text("{}")
    assert env.built
    venv = {**dist, "backend": "venv", "envs_dir": str(tmp_path)}
    with pytest.raises(PlanError, match=r"torch, which numpy's environment \(.*\) does not"):
        plan.build(quick_cfg(**venv, launcher="torchrun"))
    # the same environment with torch in it (no pip either): torchrun can start its ranks
    site = next(env.path.glob("lib/python*/site-packages"))
    (site / "torch-2.5.0.dist-info").mkdir()
    (site / "torch-2.5.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.5.0\n"
    )
    assert envs.has_distribution(env, "torch")
    assert plan.build(quick_cfg(**venv, launcher="torchrun"))
    # not built yet: nothing to look at before the run builds it
    assert plan.build(
        quick_cfg(**{**venv, "envs_dir": str(tmp_path / "none")}, launcher="torchrun")
    )
    # the other levels run one rank, whatever --launcher says
    assert plan.build(quick_cfg(frameworks=["numpy"], launcher="horovodrun", backend="local"))
    # the training level's loader at --world-size 2 starts its ranks with the launcher
    train = {"level": ["training"], "frameworks": ["numpy"], "world_size": 2, "backend": "local"}
    with pytest.raises(PlanError, match=r"--launcher horovodrun starts ranks with horovod"):
        plan.build(quick_cfg(**train, launcher="horovodrun"))


def test_a_dist_backend_the_framework_has_no_communication_for_is_refused_at_planning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`dlsuite run --level distributed --framework tensorflow,mxnet --dist-backend gloo`
    built both environments, started every task's ranks and wrote a skipped record per task
    ("rank 0: tf.distribute has no 'gloo' communication"), exit 0, 36 s on this VM, nothing
    measured. Now the plan refuses it in one line naming the framework and what it takes."""
    venv = {"level": ["distributed"], "backend": "venv", "envs_dir": str(tmp_path)}
    refused = [
        ("tensorflow", "gloo", "auto or nccl"),
        ("tensorflow", "mpi", "auto or nccl"),
        ("mxnet", "gloo", "auto"),
        ("mxnet", "nccl", "auto"),
        ("jax", "mpi", "auto, gloo or nccl"),
        ("horovod", "mpi", "auto or gloo"),
        ("horovod-tensorflow", "nccl", "auto or gloo"),
    ]
    for fw, backend, takes in refused:
        with pytest.raises(PlanError) as caught:
            plan.build(quick_cfg(frameworks=[fw], dist_backend=backend, **venv))
        assert str(caught.value) == (
            f"--dist-backend {backend}: --framework {fw} has no {backend} communication (it "
            f"takes {takes}); use --dist-backend auto"
        )
    # what each declares is planned (a device that cannot use it still skips in the worker)
    for fw, backend in [("tensorflow", "nccl"), ("jax", "gloo"), ("horovod", "gloo"),
                        ("pytorch", "mpi")]:  # fmt: skip
        cfg = quick_cfg(frameworks=[fw], dist_backend=backend, benchmarks=["allreduce"], **venv)
        assert [t.dist_backend for t in plan.build(cfg)] == [backend]
    # the other levels start no process group: the setting is not theirs to refuse
    train = {**venv, "level": ["training"], "benchmarks": ["optimizer"]}
    assert plan.build(quick_cfg(frameworks=["mxnet"], dist_backend="gloo", **train))
    # from the command line: one line, exit 2, where no chosen framework has it
    code = cli_main(["run", "--quick", "--level", "distributed", "--framework", "tensorflow,mxnet",
                     "--dist-backend", "gloo", "--backend", "venv", "--envs-dir", str(tmp_path),
                     "--dry-run", "--no-history"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].endswith(
        "--dist-backend gloo: --framework tensorflow has no gloo communication (it takes auto "
        "or nccl); use --dist-backend auto"
    ), err
    # beside a framework that has it, it is measured there (the only way to name PyTorch's
    # backend in a run of several frameworks); the other's tasks skip, as before, with a note
    cfg = quick_cfg(frameworks=["pytorch", "mxnet"], dist_backend="gloo",
                    benchmarks=["allreduce"], **venv)  # fmt: skip
    assert sorted(t.framework for t in plan.build(cfg)) == ["mxnet", "pytorch"]
    assert cfg.plan_notes == [
        "--dist-backend gloo: --framework mxnet has no gloo communication (it takes auto): its "
        "distributed tasks are skipped; run it apart with --dist-backend auto"
    ]
    # a process group of one rank takes a named backend: auto is no way out there
    one = {**venv, "world_size": 1, "benchmarks": ["allreduce"]}
    with pytest.raises(PlanError, match=r"\(it takes auto\); use --world-size 2$"):
        plan.build(quick_cfg(frameworks=["mxnet"], dist_backend="gloo", **one))
    with pytest.raises(PlanError, match=r"\(it takes auto or nccl\); use --dist-backend nccl$"):
        plan.build(quick_cfg(frameworks=["tensorflow"], dist_backend="gloo", **one))
    # from a config file: the line names the key where it was set
    toml = write(tmp_path, '[run]\nlevel = "distributed"\ndist_backend = "mpi"\n')
    with pytest.raises(PlanError, match=r"dlsuite\.toml: \[run\] dist_backend = mpi: "
                       r"--framework jax has no mpi"):  # fmt: skip
        plan.build(quick_cfg(config=toml, frameworks=["jax"], backend="venv",
                             envs_dir=str(tmp_path)))  # fmt: skip


def test_a_framework_whose_runtime_is_one_host_is_refused_over_several_nodes(
    tmp_path: Path,
) -> None:
    """`dlsuite run --level distributed --framework tensorflow --nodes 2 --site local
    --scheduler slurm` was planned and submitted: TensorFlow's TF_CONFIG lists every worker at
    MASTER_ADDR, so each task's ranks would wait for a rank on the other node until the
    timeout. Now the plan says so, exit 2; the others' runtimes span nodes."""
    site = {"level": ["distributed"], "backend": "venv", "envs_dir": str(tmp_path),
            "nodes": 2, "launcher": "srun", "site": "local", "scheduler": "slurm"}  # fmt: skip
    with pytest.raises(PlanError) as caught:
        plan.build(quick_cfg(frameworks=["tensorflow"], **site))
    assert str(caught.value).startswith(
        "--nodes 2: --framework tensorflow runs its distributed level on one node in this "
        "version: the TF_CONFIG it writes puts every worker at MASTER_ADDR"
    ), caught.value
    assert str(caught.value).endswith("; use --nodes 1")
    for fw in ("horovod-tensorflow", "mxnet", "jax", "pytorch"):
        tasks = plan.build(quick_cfg(frameworks=[fw], benchmarks=["allreduce"], **site))
        assert [t.nodes for t in tasks] == [2], fw
    # the training level's loader starts no process group: it spans nodes with TensorFlow
    train = {**site, "level": ["training"], "benchmarks": ["loader"], "world_size": 2}
    assert plan.build(quick_cfg(frameworks=["tensorflow"], **train))
    assert plan.build(quick_cfg(frameworks=["tensorflow"], **{**site, "nodes": 1}))
    # beside a framework that spans nodes (or levels TensorFlow runs), the run goes on: its
    # distributed tasks of several ranks are left out with a note (they could only time out)
    cfg = quick_cfg(frameworks=["pytorch", "tensorflow"], benchmarks=["allreduce"], **site)
    tasks = plan.build(cfg)
    assert {t.framework for t in tasks} == {"pytorch"}
    assert any("--framework tensorflow runs its distributed level on one node" in n
               and "left out" in n for n in cfg.plan_notes), cfg.plan_notes  # fmt: skip
    every = quick_cfg(frameworks=["tensorflow"], **{**site, "level": ["all"], "world_size": 2})
    tasks = plan.build(every)
    assert tasks and not any(t.level == "distributed" and t.world_size > 1 for t in tasks)
    assert any(t.level == "operator" for t in tasks)


def test_a_framework_that_runs_none_of_the_chosen_levels_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`dlsuite run --level training --framework horovod` wrote 66 skipped records and exited
    0 (Horovod runs the distributed level only). Now one line names why and the level it runs;
    a run that also chooses that level keeps its skipped records for the others."""
    venv = {"backend": "venv", "envs_dir": str(tmp_path)}
    with pytest.raises(PlanError) as caught:
        plan.build(quick_cfg(level=["training"], frameworks=["horovod"], **venv))
    assert str(caught.value) == (
        "--level training: --framework horovod runs none of it: "
        + ADAPTERS.load("horovod").levels_reason
        + "; use --level distributed"
    )
    with pytest.raises(PlanError, match=r"^--level operator \(the default\): --framework "
                       r"horovod-tensorflow runs none of it: .* --framework tensorflow"):  # fmt: skip
        plan.build(quick_cfg(frameworks=["horovod-tensorflow"], **venv))
    both = quick_cfg(level=["operator", "distributed"], frameworks=["horovod"],
                     benchmarks=["gemm", "allreduce"], **venv)  # fmt: skip
    assert {t.benchmark for t in plan.build(both)} == {"gemm", "allreduce"}
    code = cli_main(["run", "--quick", "--level", "network", "--framework", "pytorch,horovod",
                     "--backend", "venv", "--envs-dir", str(tmp_path), "--dry-run",
                     "--no-history"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].endswith("; use --level distributed (or run it apart)"), err


def test_a_strategy_no_chosen_framework_maps_is_refused(tmp_path: Path) -> None:
    """`dlsuite run --level distributed --benchmark strategies --strategy local-sgd
    --framework tensorflow,jax` ran both allreduce baselines and skipped local-sgd in both
    (exit 0): the one strategy asked for, measured nowhere. Now one line gives each
    framework's reason and the frameworks that map it."""
    from suite.adapters import ADAPTERS

    run = {"level": ["distributed"], "benchmarks": ["strategies"], "backend": "venv",
           "envs_dir": str(tmp_path)}  # fmt: skip
    with pytest.raises(PlanError) as caught:
        plan.build(quick_cfg(frameworks=["tensorflow", "jax"], strategies=["local-sgd"], **run))
    tf, jax = (ADAPTERS.load(f).unsupported_strategies["local-sgd"] for f in ("tensorflow", "jax"))
    assert str(caught.value) == (
        f"--strategy local-sgd: no chosen framework maps it (tensorflow: {tf}; jax: {jax}); "
        "pytorch maps it"
    )
    # one chosen framework maps it: planned, the other's task is skipped with its reason
    tasks = plan.build(
        quick_cfg(frameworks=["tensorflow", "mxnet"], strategies=["ps-async"], **run)
    )
    assert sorted((t.framework, t.params["strategy"]) for t in tasks) == [
        ("mxnet", "allreduce"), ("mxnet", "ps-async"),
        ("tensorflow", "allreduce"), ("tensorflow", "ps-async")]  # fmt: skip
    # every strategy of the run (no --strategy): what a framework cannot run is skipped
    assert plan.build(quick_cfg(frameworks=["jax"], **run))


def test_the_distributed_level_without_fp32_is_refused_or_noted(tmp_path: Path) -> None:
    """`dlsuite run --level distributed --framework tensorflow --dtype bf16` planned its tasks
    at bf16, started every task's ranks and wrote 5 skipped records ("the distributed level
    runs in fp32 for now"), exit 0, in 32 s. Alone the level is now refused in one line;
    beside another level its tasks are left out with a note, the other level runs."""
    venv = {"backend": "venv", "envs_dir": str(tmp_path), "frameworks": ["tensorflow"]}
    with pytest.raises(ConfigError) as caught:
        plan.build(quick_cfg(level=["distributed"], dtypes=["bf16"], **venv))
    assert str(caught.value) == (
        "--dtype bf16: the distributed level measures fp32 only (collectives move fp32, "
        "data-parallel training runs in fp32); add fp32 to it"
    )
    cfg = quick_cfg(level=["operator", "distributed"], dtypes=["bf16", "fp16"],
                    benchmarks=["gemm", "allreduce"], **venv)  # fmt: skip
    assert {(t.benchmark, t.dtype) for t in plan.build(cfg)} == {("gemm", "bf16"),
                                                                  ("gemm", "fp16")}  # fmt: skip
    assert any("so no distributed task is planned; add fp32" in n for n in cfg.plan_notes)
    both = quick_cfg(level=["distributed"], dtypes=["bf16", "fp32"], benchmarks=["allreduce"],
                     **venv)  # fmt: skip
    assert [t.dtype for t in plan.build(both)] == ["fp32"]


def test_the_suites_own_sizes_run_at_any_world_size(torch_available: None, tmp_path: Path) -> None:
    """`dlsuite run --level distributed --quick --world-size 16` (two 8-GPU nodes) exited 2:
    "data_parallel.batch: strong scaling splits the global batch 24 over 16 ranks; use a
    multiple of 16", for a size the user never gave; full sizes at 32 ranks the same for the
    strategies' digits batch. The suite's strong-scaling batches now round up to split, the
    1-rank baseline at the same batch, and the plan says so; a size the user gave is refused."""
    cfg = quick_cfg(level=["distributed"], world_size=16, benchmarks=["data_parallel"])
    tasks = plan.build(cfg)
    strong = {
        (t.params["network"], t.world_size): t for t in tasks if t.params["scaling"] == "strong"
    }
    assert {k: t.params["batch"] for k, t in strong.items()} == {
        ("mlp", 1): 48, ("mlp", 16): 48, ("resnet18", 1): 32, ("resnet18", 16): 32,
    }  # fmt: skip
    weak = {t.params["batch"] for t in tasks if t.params["scaling"] == "weak"}
    assert weak == {48, 24}  # per rank: nothing to split
    assert "rounded up to 32 for 16 ranks" in strong[("resnet18", 16)].source
    assert any("global batch 24 rounded up to 32 for 16 ranks" in n for n in cfg.plan_notes)
    # at a world size the sizes split over, nothing changes (the task ids stay as they were)
    two = plan.build(quick_cfg(level=["distributed"], world_size=2, benchmarks=["data_parallel"]))
    assert {t.params["batch"] for t in two if t.params["network"] == "resnet18"} == {24}
    # strategies: every strategy of a network keeps its allreduce baseline's batches
    for world, want in ((32, 64), (5, 60), (6, 48)):  # 5: also into 4 micro-batches
        cfg = quick_cfg(level=["distributed"], world_size=world, benchmarks=["strategies"],
                        strategies=["fp16", "pipeline"])  # fmt: skip
        batches = {(t.params["batch"], t.params["digits"]["batch"]) for t in plan.build(cfg)}
        assert batches == {(want, want)}, world
    # a size of the user's own is checked, never changed
    path = write(tmp_path, "[distributed.data_parallel]\n"
                 'sizes = [{network = "mlp", batch = 24, scaling = "strong"}]\n')  # fmt: skip
    with pytest.raises(ConfigError, match="global batch 24 over 16 ranks"):
        plan.build(resolve({"config": path, "level": ["distributed"], "world_size": 16,
                            "benchmarks": ["data_parallel"]}, env={}))  # fmt: skip


def test_the_1_rank_data_parallel_baseline_is_planned_once(
    torch_available: None, tmp_path: Path
) -> None:
    """A 3-rank run of a size at both scalings measured the same 1-rank configuration twice
    (strong's and weak's baselines: 0.34 against 3.8 ms a step under load, efficiencies 14%
    and 295% in one run). Now once, the plan says so; a 1-rank size of its own stays."""
    path = write(tmp_path, "[distributed.data_parallel]\n"
                 'sizes = [{network = "mlp", hidden = 96, batch = 36, scaling = "strong"},\n'
                 '         {network = "mlp", hidden = 96, batch = 36, scaling = "weak"},\n'
                 '         {network = "mlp", hidden = 96, batch = 72, scaling = "weak"}]\n')  # fmt: skip
    cfg = resolve({"config": path, "level": ["distributed"], "world_size": 3,
                   "benchmarks": ["data_parallel"]}, env={})  # fmt: skip
    tasks = plan.build(cfg)
    got = sorted((t.world_size, t.params["batch"], t.params["scaling"]) for t in tasks)
    assert got == [(1, 36, "strong"), (1, 72, "weak"),
                   (3, 36, "strong"), (3, 36, "weak"), (3, 72, "weak")]  # fmt: skip
    assert [n for n in cfg.plan_notes if "measured once" in n] == [
        "data_parallel mlp weak (per-rank batch 36) at 1 rank is the same configuration as "
        "mlp strong (global batch 36) at 1 rank: measured once (pytorch), the 1-rank "
        "baseline of both scalings"
    ]


def test_a_strategy_no_task_takes_is_said(torch_available: None) -> None:
    """`dlsuite run --level distributed --benchmark data_parallel --strategy fp16` trained
    uncompressed and said nothing about --strategy."""
    cfg = quick_cfg(level=["distributed"], benchmarks=["data_parallel"], strategies=["fp16"])
    assert {t.benchmark for t in plan.build(cfg)} == {"data_parallel"}
    assert any(n.startswith("--strategy fp16: only the distributed level's strategies") and
               "ignored" in n for n in cfg.plan_notes)  # fmt: skip
    cfg = quick_cfg(level=["distributed"], benchmarks=["strategies"], strategies=["fp16"])
    plan.build(cfg)
    assert not any("--strategy" in n for n in cfg.plan_notes)


@pytest.mark.parametrize(
    ("chosen", "said"),
    [
        ({"dtypes": ["bf16", "fp32", "bf16"]}, "--dtype bf16,fp32,bf16: bf16 is listed twice"),
        ({"frameworks": ["pytorch", "pytorch"]}, "--framework pytorch,pytorch: pytorch is"),
        ({"benchmarks": ["gemm", "softmax", "gemm"]}, "--benchmark gemm,softmax,gemm: gemm is"),
    ],
)
def test_a_choice_listed_twice_is_named(
    torch_available: None, chosen: dict[str, Any], said: str
) -> None:
    """``--dtype bf16,bf16`` (or a framework or benchmark twice) said "gemm: the size {'m':
    256, ...} is listed twice", naming a size the user never wrote; now the setting."""
    cfg = resolve({"quick": True, "benchmarks": ["gemm"], **chosen}, env={})
    with pytest.raises(ConfigError) as err:
        plan.build(cfg)
    assert said in str(err.value) and "size" not in str(err.value), str(err.value)


def test_sizes_from_a_network_and_a_files_section_are_not_both_silently_one(
    tmp_path: Path, torch_available: None
) -> None:
    """``--sizes from:mlp`` with a file holding [operator.gemm] sizes planned the file's gemm
    sizes and never read the MLP's, without a word; now exit 2 naming both. A section of a
    benchmark left out does not conflict, and its note does not replace the error of a
    selection that matches no task."""
    path = write(
        tmp_path, "[run]\nquick = true\n\n[operator.gemm]\nsizes = [{m = 3, n = 5, k = 7}]\n"
    )
    cfg = resolve({"config": path, "operator_sizes": "from:mlp"}, env={})
    with pytest.raises(ConfigError, match=r"--sizes from:mlp and .*\[operator\.gemm\] both"):
        plan.build(cfg)
    cfg = resolve({"config": path, "operator_sizes": "from:mlp", "benchmarks": ["softmax"]},
                  env={})  # fmt: skip
    with pytest.raises(ConfigError, match="the selection matches no task"):
        plan.build(cfg)  # the MLP has no softmax
