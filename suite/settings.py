"""The run's settings as data: :class:`RunConfig` and its defaults.

Resolving them from the layers (CLI > environment > config file > site > defaults) and checking
them against the registries is :mod:`suite.config`; this module imports nothing of the suite,
so everything that only reads settings (the plan, the schedulers, the runner) sits below the
checks and the registries they use.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_DTYPES = ["fp32", "bf16", "fp16"]
QUICK_BUDGET_S, FULL_BUDGET_S = 1.0, 10.0
QUICK_TIMEOUT_S, FULL_TIMEOUT_S = 300.0, 1800.0
#: settings only some schedulers take (a scheduler's ``options`` says which), and their flags
SCHEDULER_OPTIONS = {
    "partition": "--partition",
    "tasks_per_job": "--tasks-per-job",
    "job_name": "--job-name",
}


@dataclass
class RunConfig:
    level: list[str] = field(default_factory=lambda: ["operator"])
    frameworks: list[str] = field(default_factory=lambda: ["pytorch"])
    benchmarks: list[str] | None = None
    #: "auto": local when the framework imports in this interpreter, else its venv
    backend: str = "auto"
    device: str = "auto"
    dtypes: list[str] = field(default_factory=lambda: list(DEFAULT_DTYPES))
    quick: bool = False
    out: str | None = None
    resume: bool = False
    timeout: float | None = None
    seed: int = 0
    measure: dict[str, Any] = field(default_factory=dict)
    peak_tflops: dict[str, float] = field(default_factory=dict)
    sizes: dict[str, list[dict[str, Any]]] = field(
        default_factory=dict
    )  # "level.benchmark" -> sizes
    networks: list[str] | None = None
    model: str | None = None
    #: --sizes from:NETWORK: the operator level's sizes taken from a network's graph
    #: (suite/levels/operator/from_network.py); None: the benchmarks' own size set
    operator_sizes: str | None = None
    batch: list[int] | None = None
    compile: bool = False
    xla: bool = False
    world_size: int = 2
    #: whether a layer set world_size (the training level runs on one rank unless asked)
    world_size_given: bool = False
    nodes: int = 1
    #: "auto": the framework's own launcher (torchrun for PyTorch), else the suite's spawn
    launcher: str = "auto"
    dist_backend: str = "auto"
    #: the strategies benchmark's strategies (None: all; the allreduce baseline always runs)
    strategies: list[str] | None = None
    #: telemetry sampling interval in the timed region, and refusing tasks on a busy machine
    #: (suite/telemetry; docs/methodology.md#telemetry)
    telemetry_interval_ms: float = 100.0
    #: sample telemetry in the timed region (off: no sampler thread; the energy counter and
    #: the driver's own utilisation samples are still read around each region)
    telemetry: bool = True
    require_quiet: bool = False
    envs_dir: str | None = None
    #: the training level: a user's dataset (--data) and where the suite's datasets are made
    #: and found (--data-dir > DLSUITE_DATA_DIR > [run] data_dir > the site's > the default)
    data: str | None = None
    data_dir: str | None = None
    data_dir_source: str = "the default"
    #: only these dataset formats (--format); the images a loader reads (--images: a subset of
    #: --data, or the suite dataset's size); a user's labels' base (--label-base)
    formats: list[str] | None = None
    images: int | None = None
    label_base: int | None = None
    #: what planning found at --data (suite/levels/training/dataset.py: UserData.to_dict)
    data_found: dict[str, Any] | None = None
    #: what planning left out and why (printed before the run)
    plan_notes: list[str] = field(default_factory=list)
    config_file: str | None = None
    #: "none": now, here; "slurm": sbatch job arrays on the --site's cluster
    scheduler: str = "none"
    site: str | None = None
    partition: str | None = None
    tasks_per_job: int | None = None
    job_name: str | None = None
    #: "session": one worker process runs a sequence of tasks of one environment, device and
    #: rank set (suite/session.py); "task": a process per task
    isolate: str = "session"
    #: measure records that ended noisy (their CI of the median wider than the target when
    #: the time budget ran out) again at the end of the run, up to this many times
    retry_noisy: int = 0

    @property
    def size_set(self) -> str:
        return "quick" if self.quick else "full"

    @property
    def task_timeout(self) -> float:
        if self.timeout is not None:
            return self.timeout
        return QUICK_TIMEOUT_S if self.quick else FULL_TIMEOUT_S

    def measure_settings(self) -> dict[str, Any]:
        base: dict[str, Any] = {"time_budget_s": QUICK_BUDGET_S if self.quick else FULL_BUDGET_S}
        base.update(self.measure)
        return base

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
