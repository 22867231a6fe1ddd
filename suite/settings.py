"""The run's settings as data: :class:`RunConfig`, and the one declaration of every option.

Each setting of ``dlsuite run`` is declared once, as a field of :class:`RunConfig` made by
:func:`option`: its type (the annotation), its default, its flag, its ``DLSUITE_*`` variable,
whether the config file's ``[run]`` table takes it, the values and bounds it accepts, and its
help. Everything else is generated from that table (:data:`OPTIONS`): the command-line flags
(:mod:`suite.cli.options`), the environment layer, the config file's keys and the checks of
every layer (:mod:`suite.config`), ``schemas/config.schema.json`` and the option table of
docs/guide/configuration.md (``python -m suite.config --write``; a unit test fails when either file
differs from what the table gives). ReFrame declares its options the same way
(``envvar=..., configvar=...`` beside the flag).

Resolving the settings from the layers (CLI > environment > config file > site > defaults)
and checking them against the registries is :mod:`suite.config`; this module imports nothing
of the suite, so everything that only reads settings (the plan, the schedulers, the runner)
sits below the checks and the registries they use.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_DTYPES = ["fp32", "bf16", "fp16"]
QUICK_BUDGET_S, FULL_BUDGET_S = 1.0, 10.0
QUICK_TIMEOUT_S, FULL_TIMEOUT_S = 300.0, 1800.0
#: the most ranks, nodes and samples per batch this version plans (far beyond any machine
#: today; a bound so a typo such as 10**20 is one clear error, not an overflow deep inside)
MAX_WORLD_SIZE, MAX_BATCH, MAX_SEED = 65536, 1 << 20, (1 << 32) - 1
#: the most rounds of --retry-noisy (each re-measures every record still noisy)
MAX_NOISY_RETRIES = 10
#: what a name that reaches a Slurm script may be (the schema's pattern for these keys)
NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


@dataclass(frozen=True)
class Option:
    """One option: a setting of :class:`RunConfig` (declared with :func:`option`) or a flag
    of ``dlsuite run`` that is not a setting (:data:`COMMAND_FLAGS`)."""

    #: one line (or a few) for ``--help``, the schema's description and, without ``doc``,
    #: docs/guide/configuration.md; ``{choices}`` is replaced by a plug-in registry's names
    help: str
    #: the command-line flag (``--isolate``); None: no flag
    flag: str | None = None
    #: the environment variable (``DLSUITE_ISOLATE``); None: none
    env: str | None = None
    #: whether the config file's ``[run]`` table takes it (as the key ``name``)
    config: bool = True
    #: the flag's value in ``--help`` and the docs (``M`` in ``--isolate M``)
    metavar: str | None = None
    #: the values it takes (of a list: each item's), checked in every layer and the schema's
    #: ``enum``; a string ``"module:NAME"`` names a tuple defined there, read when needed
    choices: tuple[Any, ...] | str | None = None
    #: what the values mean, where their names do not say (added to the message)
    choices_why: str = ""
    #: a plug-in name: checked against the registry ``suite.config.PLUGINS[name]``
    plugin: bool = False
    #: bounds of a number (of a list: each item's), checked in every layer and the schema's
    minimum: float | None = None
    maximum: float | None = None
    #: a positive number (the schema's ``exclusiveMinimum: 0``)
    positive: bool = False
    #: why the bounds are what they are (added to the message)
    bounds_why: str = ""
    #: the schema's pattern for a string (checked where the value is used otherwise)
    pattern: str | None = None
    #: taken only by the schedulers whose ``options`` name it (:data:`SCHEDULER_OPTIONS`)
    scheduler_option: bool = False
    #: a boolean with both ``--x`` and ``--no-x`` (else only ``--x``)
    negatable: bool = False
    #: the config file takes one string as a list of one (``level = "network"``)
    one_or_list: bool = False
    #: docs/guide/configuration.md's text, where it says more than ``help``
    doc: str | None = None
    #: docs/guide/configuration.md's default, where it is not the value itself
    doc_default: str | None = None
    #: filled in from the field (or given, for a command flag): its name, ``str``, ``int``,
    #: ``float``, ``bool``, ``list[str]`` or ``list[int]``, its default
    name: str = ""
    kind: str = ""
    default: Any = None

    @property
    def is_list(self) -> bool:
        return self.kind.startswith("list[")

    @property
    def item_kind(self) -> str:
        return self.kind[5:-1] if self.is_list else self.kind


def option(default: Any, help: str, **declared: Any) -> Any:
    """A :class:`RunConfig` field that is an option (see :class:`Option` for ``declared``)."""
    meta = {"option": Option(help=help, **declared)}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class RunConfig:
    # -- what runs ------------------------------------------------------------------------
    level: list[str] = option(
        ["operator"], "operator, network, distributed, training or all (comma-separated)",
        flag="--level", metavar="L", env="DLSUITE_LEVEL", one_or_list=True,
        doc="`operator`, `network`, `distributed`, `training`, or `all` (every level)",
    )  # fmt: skip
    frameworks: list[str] = option(
        ["pytorch"], "framework(s), comma-separated (see `dlsuite list`)",
        flag="--framework", metavar="F", env="DLSUITE_FRAMEWORKS",
        doc="framework(s), see `dlsuite list`: the built-in adapters "
        "(`suite/adapters/__init__.py`) and any a package registers through the "
        "`dlsuite.adapters` entry point",
    )  # fmt: skip
    benchmarks: list[str] | None = option(
        None, "only these benchmarks (comma-separated)",
        flag="--benchmark", metavar="B", env="DLSUITE_BENCHMARKS",
        doc="only these benchmarks. operator: `attention`, `conv2d`, `gelu`, `gemm`, `norm`, "
        "`softmax`; network: `train`, `infer`, `digits`, `agreement`; distributed: "
        "`allreduce`, `allgather`, `broadcast`, `reduce_scatter`, `data_parallel`, "
        "`strategies`; training: `loader`, `feed`, `optimizer`. A name in "
        "none of the selected levels is an error",
        doc_default="all of the level(s)",
    )  # fmt: skip
    #: "auto": local when the framework imports in this interpreter, else its venv
    backend: str = option(
        "auto", "where workers run: auto (default: local when the framework imports here, else "
        "venv, the framework's own environment in .venvs/) or one of: {choices} (docker and "
        "apptainer: the framework's image, see docs/guide/containers.md)",
        flag="--backend", metavar="K", env="DLSUITE_BACKEND", plugin=True,
        doc="where workers run: `local` (the interpreter that runs `dlsuite`), `venv` (the "
        "framework's own environment, built on first use, see [Environments](#environments)), "
        "`docker` or `apptainer` (the framework's image, see [containers.md](containers.md)), "
        "or `auto`: per framework, `local` when the framework imports here, else `venv`. "
        "`local` with a framework that does not import here, and `venv` (or `auto`) with a "
        "framework that has no recipe, are errors (exit 2)",
    )  # fmt: skip
    envs_dir: str | None = option(
        None, "where the venv backend keeps environments (.venvs)",
        flag="--envs-dir", metavar="DIR", env="DLSUITE_ENVS_DIR",
        doc="where the `venv` backend keeps its environments",
        doc_default="`.venvs` in the checkout (`~/.cache/dlsuite/venvs` for an installed suite)",
    )  # fmt: skip
    device: str = option(
        "auto", "cpu, cuda or auto (default: cuda when the framework sees a GPU)",
        flag="--device", metavar="D", env="DLSUITE_DEVICE", choices=("auto", "cpu", "cuda"),
        choices_why="auto: cuda where the framework sees a GPU, else cpu",
        doc="`cpu`, `cuda`, or `auto` (cuda when the framework sees a GPU). `cuda` where the "
        "workers start on this host (no `--scheduler`, not `--launcher srun`, ranks not over "
        "`--nodes`) and it shows no GPU "
        "(no `/dev/nvidia<N>`, `/dev/kfd`, `/dev/dxg` or a Jetson's `/dev/nvhost-ctrl-gpu` or "
        "`/dev/nvgpu`, `nvidia-smi -L` lists none, or "
        "`CUDA_VISIBLE_DEVICES` empty) is refused when planning (exit 2); a run sent to Slurm is "
        "not judged by the host that submits it. A GPU the framework cannot use (a CPU-only "
        "build) gives `failed` records",
    )  # fmt: skip
    dtypes: list[str] = option(
        DEFAULT_DTYPES, "fp32,tf32,bf16,fp16 (default fp32,bf16,fp16)",
        flag="--dtype", metavar="T", env="DLSUITE_DTYPES", choices="suite.dtypes:DTYPES",
        doc="any of `fp32`, `tf32`, `bf16`, `fp16`. A dtype the framework or device lacks "
        "(`tf32` on a CPU, bf16/fp16 for `numpy`) is recorded as `skipped`. At the network "
        "level `bf16`/`fp16` mean mixed precision (autocast, fp32 weights; fp16 with a loss "
        "scaler). The distributed level and `agreement` keep only `fp32`; dtypes without "
        "`fp32` plan no distributed task (a note; exit 2 when it is the only level)",
    )  # fmt: skip
    quick: bool = option(
        False, "small sizes that run in seconds on a CPU",
        flag="--quick", env="DLSUITE_QUICK", negatable=True,
        doc="quick sizes (seconds on a CPU) and quick budgets, see [Defaults](#defaults). "
        "`--no-quick` turns off `quick = true` from a config file or `DLSUITE_QUICK=1` for one "
        "run",
    )  # fmt: skip
    # -- the network level ----------------------------------------------------------------
    networks: list[str] | None = option(
        None, "network level: only these zoo networks",
        flag="--network", metavar="N", env="DLSUITE_NETWORKS",
        doc="only these zoo networks (`mlp`, `alexnet`, `resnet18`, `resnet50`, `resnet101`, "
        "`transformer`) in `train`, `infer`, `agreement` and `data_parallel`. An unknown name "
        "is an error. `digits` and the collectives ignore it",
        doc_default="all of the zoo",
    )  # fmt: skip
    model: str | None = option(
        None, "network and distributed levels: a user ONNX file to train/infer instead of "
        "the zoo (train, infer, agreement, data_parallel)",
        flag="--model", metavar="FILE",
        doc="a user's ONNX file trained/inferred instead of the zoo in the network level's "
        "`train` and `infer`, compared across the frameworks in `agreement` (`digits` does "
        "not run then) and trained data-parallel in the "
        "distributed level's `data_parallel` at a per-rank batch (weak scaling; `strategies` "
        "does not run then, the collectives' sweeps do: `dlsuite project` fits the links to "
        "them). A missing, truncated or invalid file is an error naming it (exit 2), and so is "
        "`--model` without the network or distributed level among the levels (the others "
        "would run their own networks); ops the adapter cannot map give `skipped` records",
    )  # fmt: skip
    model_dims: str | None = option(
        None, "the sizes of --model's (or --sizes from:FILE.onnx's) dynamic input dimensions "
        "other than the batch, by the names the file gives them: sequence=128 or "
        "height=224,width=224",
        flag="--model-dims", metavar="NAME=N,...",
        doc="the sizes of `--model`'s (or `--sizes from:FILE.onnx`'s) dynamic input dimensions other than the batch (the first), by the names the file gives them (`dlsuite inspect` names them): "
        "`sequence=128`, `height=224,width=224`. A dimension left dynamic, a name the inputs "
        "do not have or one given twice, and sizes that make a bound input (an attention mask) "
        "past ONNX's 2 GiB, are errors (exit 2)",
        doc_default="none: every dimension but the batch fixed in the file",
    )  # fmt: skip
    batch: list[int] | None = option(
        None, "network level: batch sizes (comma-separated); with --sizes from:..., the batch "
        "the operators' shapes are taken at",
        flag="--batch", metavar="B", minimum=1, maximum=MAX_BATCH,
        doc="network level, `train` and `infer`: replaces the built-in batch sizes (every "
        "network gets every listed batch); with `--model`, also the per-rank batches of "
        "`data_parallel`; with `--sizes from:...`, the batch(es) the operators' shapes are "
        "taken at",
        doc_default="per network and size set",
    )  # fmt: skip
    #: --sizes from:NETWORK: the operator level's sizes taken from a network's graph
    #: (suite/levels/operator/from_network.py); None: the benchmarks' own size set
    operator_sizes: str | None = option(
        None, "operator level: the sizes of every operator in a network's graph at the run's "
        "batch and dtype, deduplicated, forward and backward: from:resnet50, "
        "from:resnet18,resolution=224,width=4 (a zoo network and its fields) or "
        "from:PATH.onnx (a model of yours); the network at --quick or full size",
        flag="--sizes", metavar="from:NETWORK", pattern="^from:.+",
        doc="operator level: the sizes of every operator in a network's graph, at the run's "
        "batch (`--batch`, else the network level's for the size set) and dtypes, "
        "deduplicated, forward and (where training runs one) backward: `from:resnet50`, "
        "`from:resnet18,resolution=224,width=4` (a zoo network at its `--quick` or full size, "
        "the fields after it over that size) or `from:PATH.onnx` (a model of yours, as "
        "`--model` runs it: its other inputs bound by name, its dimensions sized by "
        "`--model-dims`). "
        "Convolutions, GEMMs and linear layers (batched products too), batch and layer norms, "
        "softmax, attention's products and GELU (also when spelled out as "
        "`x·½·(1+erf(x/√2))`) become tasks; the rest (ReLU, adds, pooling, ...) has no "
        "benchmark and is costed by the report from the bytes it moves "
        "([explain.md](explain.md)). Each task's `source` names the graph, the shape, its use "
        "count and nodes. Refused (exit 2) without the operator level, for an unknown "
        "network, a bad field or file, and beside a config file's `[operator.*]` sizes of a "
        "chosen benchmark (one of the two would go unread)",
        doc_default="the benchmarks' own sizes",
    )  # fmt: skip
    compile: bool = option(
        False, "network level: compile the model (PyTorch: torch.compile, TensorFlow: XLA)",
        flag="--compile",
        doc="network level, `train` and `infer`: compile the model (PyTorch: `torch.compile`; "
        "TensorFlow: XLA, `jit_compile=True`). JAX and MXNet always compile (XLA, a hybridized "
        "block) and NumPy never does: their records say so in `work.options_not_applied`. "
        "There is no `--no-compile`",
    )  # fmt: skip
    xla: bool = option(
        False, "operator level: compile the operators with XLA (TensorFlow's jit_compile)",
        flag="--xla",
        doc="operator level: compile the operator words with XLA (TensorFlow: "
        "`tf.function(jit_compile=True)`). An adapter that cannot (`xla_capable = False`: "
        "PyTorch, MXNet, NumPy) gives `skipped` records, and so does JAX, which always compiles "
        "with XLA (the run would be the same). Part of the task id. There is no `--no-xla`",
    )  # fmt: skip
    # -- the distributed level ------------------------------------------------------------
    world_size: int = option(
        2, "distributed level: ranks (default 2)",
        flag="--world-size", metavar="N", env="DLSUITE_WORLD_SIZE",
        minimum=1, maximum=MAX_WORLD_SIZE,
        doc="distributed level: ranks. Collectives and strategies need at least 2 (else exit "
        "2, naming the fix the chosen frameworks take), or `--world-size 1` with a named "
        "`--dist-backend` (MXNet takes none: 2 ranks there): a process group of one rank, "
        "so the framework's own path (NCCL's init, device buffers, streams, the timer) runs on "
        "a machine with one GPU; `data_parallel` then wraps DDP at one rank, and the "
        "strategies that mean something at one rank run (allreduce and its compressions; the "
        "others are skipped with the reason). Without it `data_parallel` runs at 1 rank (the "
        "scaling baseline, no process group) and at N. Training level: the `loader` reads its "
        "shard on each of N ranks (`feed` and `optimizer` run on one process, with a note). "
        "Given (flag or file) with no chosen benchmark that runs on several ranks: exit 2",
    )  # fmt: skip
    nodes: int = option(
        1, "distributed level: nodes the ranks spread over (default 1)",
        flag="--nodes", metavar="N", minimum=1,
        doc="distributed level: nodes the ranks spread over; must divide `--world-size`. N > 1 "
        "requires `--launcher srun` inside a Slurm allocation (the backend starts the launcher "
        "on this host only; the other launchers would rendezvous at 127.0.0.1); otherwise "
        "exit 2",
    )  # fmt: skip
    #: "auto": the framework's own launcher (torchrun for PyTorch), else the suite's spawn
    launcher: str = option(
        "auto", "distributed level: auto (default: the framework's own, torchrun for PyTorch, "
        "else spawn) or one of: {choices}",
        flag="--launcher", metavar="L", env="DLSUITE_LAUNCHER", plugin=True,
        doc="tasks of 2 or more ranks (the distributed level's, the training level's `loader` "
        "at `--world-size` N): `auto` (the framework's "
        "`default_launcher`: `torchrun` for PyTorch, `spawn` for the others), `spawn` (the "
        "suite's own, one node, any framework), `torchrun`, `mpirun` (Open MPI), `srun` "
        "(inside a Slurm allocation), `horovodrun`. `single` with `--world-size` ≥ 2 is an "
        "error (exit 2). Tasks of 1 rank always use `single`",
    )  # fmt: skip
    #: the strategies benchmark's strategies (None: all; the allreduce baseline always runs)
    strategies: list[str] | None = option(
        None, "distributed level, strategies benchmark: only these strategies (comma-separated; "
        "allreduce, the baseline, always runs): allreduce, ps-sync, ps-async, ssp, fp16, bf16, "
        "powersgd, 2bit, 1bit, local-sgd, pipeline, adasum",
        flag="--strategy", metavar="S", env="DLSUITE_STRATEGIES",
        choices="suite.strategies:STRATEGIES",
        doc="distributed level, `strategies` benchmark: only these strategies (comma-separated: "
        "`allreduce`, `ps-sync`, `ps-async`, `ssp`, `fp16`, `bf16`, `powersgd`, `2bit`, "
        "`1bit`, `local-sgd`, `pipeline`, `adasum`); the `allreduce` baseline always runs, "
        "first. An unknown name is an error (exit 2). See [strategies.md](../reference/strategies.md)",
        doc_default="all",
    )  # fmt: skip
    dist_backend: str = option(
        "auto", "auto (NCCL on GPUs, gloo on CPUs), gloo, nccl, mpi",
        flag="--dist-backend", metavar="B", choices=("auto", "gloo", "nccl", "mpi"),
        choices_why="auto: NCCL on GPUs, gloo on CPUs",
        doc="distributed level: `auto` (the framework's best for the device; PyTorch: NCCL on "
        "GPUs, gloo on CPUs; TensorFlow: NCCL on GPUs, RING on CPUs), `gloo`, `nccl`, `mpi`; a "
        "backend the framework has no such communication for (TensorFlow: gloo, mpi; MXNet: "
        "all three; JAX: mpi; Horovod: nccl, mpi) is refused at planning, exit 2, where no "
        "chosen framework has it (beside one that has, a note, and that framework's distributed "
        "tasks are `skipped`); one it "
        "cannot use on the task's device (NCCL on a CPU) gives `skipped` records",
    )  # fmt: skip
    # -- the training level ---------------------------------------------------------------
    #: a user's dataset (--data) and where the suite's datasets are made and found
    #: (--data-dir > DLSUITE_DATA_DIR > [run] data_dir > the site's > the default)
    data: str | None = option(
        None, "training level: a dataset of yours (ImageFolder, TFRecord, RecordIO, WebDataset "
        "or a `dlsuite data make` directory) instead of the suite's; checked up front",
        flag="--data", metavar="PATH", env="DLSUITE_DATA",
        doc="training level: a dataset of yours (ImageFolder, TFRecord, RecordIO, WebDataset, or "
        "a `dlsuite data make` directory) instead of the suite's. Planned from what it holds "
        "(its formats only; the loader and feed benchmarks without `--benchmark`), checked at "
        "planning: a dataset that cannot be used is one line, exit 2. See "
        "[training-level.md](../reference/training-level.md#a-users-dataset---data-path)",
    )  # fmt: skip
    #: only these dataset formats (--format); the images a loader reads (--images: a subset of
    #: --data, or the suite dataset's size); a user's labels' base (--label-base)
    formats: list[str] | None = option(
        None, "training level: only these dataset formats (folder, webdataset, tfrecord, "
        "recordio); with --data, one the dataset does not hold is an error at planning "
        "(default: what --data holds, else every format)",
        flag="--format", metavar="F", env="DLSUITE_FORMAT",
        choices="suite.adapters.data_words:DATA_FORMATS",
        doc="training level: only these dataset formats (`folder`, `webdataset`, `tfrecord`, "
        "`recordio`); with `--data`, one the dataset does not hold is an error (exit 2), and "
        "so are formats none of the chosen frameworks reads",
        doc_default="what `--data` holds, else every format",
    )  # fmt: skip
    images: int | None = option(
        None, "training level: the images a loader reads: with --data a stratified subset of "
        "the dataset (whole shards of TFRecord and WebDataset), else the suite dataset's size",
        flag="--images", metavar="N", minimum=1, maximum=10_000_000,
        doc="training level: the images a loader reads: of `--data` a subset (stratified by "
        "class for an ImageFolder, whole shards of TFRecord and WebDataset, a part of a "
        "RecordIO file), else the suite dataset's size",
        doc_default="the whole dataset",
    )  # fmt: skip
    label_base: int | None = option(
        None, "training level: a packed dataset's labels count from 0 or 1 (default: detected, "
        "a 0 anywhere means 0-based)",
        flag="--label-base", metavar="0|1", choices=(0, 1),
        choices_why="a packed dataset's labels count from 0 or from 1",
        doc="training level: a packed dataset's labels count from 0 or 1 (detected: a 0 "
        "anywhere means 0-based)",
        doc_default="detected",
    )  # fmt: skip
    data_dir: str | None = option(
        None, "training level: where the suite's datasets are made on first use and reused "
        "(default: DLSUITE_DATA_DIR, [run] data_dir, the site's data_dir, ~/.cache/dlsuite/data)",
        flag="--data-dir", metavar="DIR", env="DLSUITE_DATA_DIR",
        doc="training level: where the suite's datasets are made and found, and the indexes of "
        "users' datasets cached (`indexes/`)",
        doc_default="the site's `data_dir`, else `~/.cache/dlsuite/data`",
    )  # fmt: skip
    # -- the run --------------------------------------------------------------------------
    out: str | None = option(
        None, "run directory (default runs/<timestamp>-<level>)",
        flag="--out", metavar="DIR", env="DLSUITE_OUT",
        doc="run directory, locked for the run's life (a second run on it exits 2 naming the "
        "holder). Refused if it already holds results, unless `--resume`",
        doc_default="`runs/<YYYYmmdd-HHMMSS>-<levels>` under the current directory",
    )  # fmt: skip
    resume: bool = option(
        False, "continue the run in --out (required), skipping finished tasks",
        flag="--resume", config=False,
        doc="continue the run in `--out` (without one: exit 2, naming the newest run of the "
        "level under `runs/`): repair a partial last line, skip complete tasks "
        "(every record `ok`, or `skipped` for a reason other than `--require-quiet`), run "
        "every other one again — no record yet, `failed`, `timeout`, `oom`, refused, or a "
        "Slurm job's `SlurmJobEnded` placeholder. Replaced records move to "
        "`RUN_DIR/superseded.jsonl`; the new ones carry `retry` (attempt, previous status and "
        "reason). A collective's sweep stopped part-way measures only the sizes it had left; "
        "the sizes it measured before stay (with `--scheduler slurm` it runs whole again). "
        "With `--scheduler slurm` a job still in the queue is waited for, not "
        "resubmitted. Refused (exit 2, naming the holder) while another run holds the "
        "directory",
    )  # fmt: skip
    timeout: float | None = option(
        None, "per-task timeout in seconds",
        flag="--timeout", metavar="S", env="DLSUITE_TIMEOUT", positive=True,
        doc="per-task wall-clock limit (for a distributed task: all its ranks together); the "
        "process group is terminated and a `timeout` record written",
        doc_default=f"{QUICK_TIMEOUT_S:g} s quick, {FULL_TIMEOUT_S:g} s full",
    )  # fmt: skip
    #: "session": one worker process runs a sequence of tasks of one environment, device and
    #: rank set (suite/session.py); "task": a process per task
    isolate: str = option(
        "session", "session (default): one worker process runs a sequence of tasks of one "
        "environment, device and rank set, a crashed or timed-out task costs only itself; "
        "task: a new worker process for every task",
        flag="--isolate", metavar="M", env="DLSUITE_ISOLATE", choices=("session", "task"),
        choices_why="session: one worker process for a sequence of tasks, the default; task: a "
        "process per task",
        doc="`session`: one worker process (per rank) runs a sequence of tasks of one "
        "environment, device and rank set; a task that crashes, hangs or fails costs only "
        "itself and a fresh process takes the rest "
        "([methodology](../reference/methodology.md#worker-sessions-many-tasks-per-process)). `task`: a new "
        "process for every task",
    )  # fmt: skip
    #: measure records that ended noisy (their CI of the median wider than the target when
    #: the time budget ran out) again at the end of the run, up to this many times
    retry_noisy: int = option(
        0, "measure again, at the end of the run, records whose confidence interval of the "
        "median ended wider than the target (up to N rounds; default 0)",
        flag="--retry-noisy", metavar="N", minimum=0, maximum=MAX_NOISY_RETRIES,
        doc="at the end of the run, measure again every task with a *noisy* record (the time "
        "budget or `max_samples` stopped it before the CI of the median was as narrow as "
        "`target_ci_rel`), up to "
        "N rounds; the earlier records move to `superseded.jsonl`, the new ones carry `retry` "
        "with the width that made them rerun",
    )  # fmt: skip
    seed: int = option(
        0, "seed of the input generator",
        flag="--seed", metavar="N", minimum=0, maximum=MAX_SEED,
        bounds_why="every framework's generator takes a 32-bit seed",
        doc="seed of the input generator and of the zoo's initial weights; a non-negative "
        "integer below 2^32",
    )  # fmt: skip
    #: sample telemetry in the timed region (off: no sampler thread; the energy counter and
    #: the driver's own utilisation samples are still read around each region)
    telemetry: bool = option(
        True, "sample telemetry in the timed region (default on); --no-telemetry runs no "
        "sampler thread, to measure its cost (the energy counter and the driver's own "
        "utilisation samples are still read around each timed region)",
        flag="--telemetry", negatable=True,
        doc="`--no-telemetry` starts no sampler thread in the timed regions (the records say "
        "`telemetry.sampling: false`), to measure what the sampler costs; the GPU's energy "
        "counter, the driver's own utilisation samples and the host's CPU times are still read "
        "at each region's entry and exit",
    )  # fmt: skip
    #: telemetry sampling interval in the timed region, and refusing tasks on a busy machine
    #: (suite/telemetry; docs/reference/methodology.md#telemetry)
    telemetry_interval_ms: float = option(
        100.0, "telemetry sampling interval in the timed region, milliseconds (default 100)",
        flag="--telemetry-interval", metavar="MS", minimum=1, maximum=60_000,
        doc="telemetry sampling interval during each timed region, in milliseconds (1 to "
        "60000, else exit 2): GPU samples through NVML, host samples through psutil, written "
        "to `RUN_DIR/telemetry/<task_id>-rank<r>.jsonl`. See "
        "[methodology.md](../reference/methodology.md#telemetry-and-the-quiet-machine-check)",
    )  # fmt: skip
    require_quiet: bool = option(
        False, "refuse (skip) a task when the quiet-machine check finds other load on its CPU "
        "cores or GPUs",
        flag="--require-quiet",
        doc="refuse a task when the quiet-machine check before it finds the machine busy "
        "(other load on its CPU cores, another process on its GPU, a busy or throttled GPU): "
        "the task gets a `skipped` record whose reason names what is busy, and the run goes "
        "on. Without it the verdict is only recorded (`telemetry.quiet`). There is no "
        "`--no-require-quiet`",
    )  # fmt: skip
    # -- where and when: schedulers and sites ----------------------------------------------
    #: "none": now, here; "slurm": sbatch job arrays on the --site's cluster
    scheduler: str = option(
        "none", "when and on which nodes: one of {choices} (default none: now, here; slurm: "
        "job arrays, needs --site)",
        flag="--scheduler", metavar="S", env="DLSUITE_SCHEDULER", plugin=True,
        doc="when and on which nodes: `none` (now, on this machine) or `slurm` (a job array on "
        "the site's cluster; needs `--site`). See [clusters.md](clusters.md)",
        doc_default="`none` (`slurm` when a `--site` says so)",
    )  # fmt: skip
    site: str | None = option(
        None, "site profile: a name in sites/ (e.g. local) or the path of a .toml",
        flag="--site", metavar="NAME", env="DLSUITE_SITE",
        doc="a site profile: `NAME.toml` in `$DLSUITE_SITES_DIR` or `sites/`, or a path. "
        "Validated against `schemas/site.schema.json` (exit 2 naming the field)",
    )  # fmt: skip
    partition: str | None = option(
        None, "slurm: a partition of the site (default: the site's)",
        flag="--partition", metavar="P", pattern=NAME_PATTERN, scheduler_option=True,
        doc="slurm: one of the site's `[partitions]`",
        doc_default="the site's `partition`",
    )  # fmt: skip
    tasks_per_job: int | None = option(
        None, "slurm: tasks per array element (default: the site's, else 1)",
        flag="--tasks-per-job", metavar="N", minimum=1, scheduler_option=True,
        doc="slurm: tasks (or groups that must share an element: a `data_parallel` size at 1 "
        "and N ranks, an `agreement` point) per array element",
        doc_default="the site's `tasks_per_job`, else 1",
    )  # fmt: skip
    job_name: str | None = option(
        None, "slurm: job name (default dlsuite-<run dir name>)",
        flag="--job-name", metavar="NAME", pattern=NAME_PATTERN, scheduler_option=True,
        doc="slurm: the job's name; letters, digits, `.`, `_`, `-` (at most 64), else exit 2",
        doc_default="`dlsuite-<run directory name>`",
    )  # fmt: skip

    # -- not options: what resolving and planning found ------------------------------------
    #: the --config file, and its [measure], [device] peak_tflops and per-benchmark sizes
    config_file: str | None = None
    measure: dict[str, Any] = field(default_factory=dict)
    peak_tflops: dict[str, float] = field(default_factory=dict)
    sizes: dict[str, list[dict[str, Any]]] = field(
        default_factory=dict
    )  # "level.benchmark" -> sizes
    #: whether a layer set world_size (the training level runs on one rank unless asked)
    world_size_given: bool = False
    #: per setting, where its value came from when not the flag or the default (the variable,
    #: or the config file's key), so that an error names what the user wrote
    origin: dict[str, str] = field(default_factory=dict)
    #: which layer chose data_dir (suite/datasets/location.py)
    data_dir_source: str = "the default"
    #: what planning found at --data (suite/levels/training/dataset.py: UserData.to_dict)
    data_found: dict[str, Any] | None = None
    #: what planning left out and why (printed before the run)
    plan_notes: list[str] = field(default_factory=list)

    @property
    def size_set(self) -> str:
        return "quick" if self.quick else "full"

    @property
    def task_timeout(self) -> float:
        if self.timeout is not None:
            return self.timeout
        return QUICK_TIMEOUT_S if self.quick else FULL_TIMEOUT_S

    @property
    def starts_ranks(self) -> bool:
        """Whether the run's levels start ranks through ``--launcher``: the distributed
        level's benchmarks, and the training level's loader at a given ``--world-size``."""
        if {"distributed", "all"} & set(self.level):
            return True
        return "training" in self.level and self.world_size_given and self.world_size > 1

    def measure_settings(self) -> dict[str, Any]:
        base: dict[str, Any] = {"time_budget_s": QUICK_BUDGET_S if self.quick else FULL_BUDGET_S}
        base.update(self.measure)
        return base

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _kind(hint: Any) -> str:
    """``str``, ``int``, ``float``, ``bool``, ``list[str]`` or ``list[int]`` of a field's type
    (``X | None`` is X: None means "not given")."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        return f"list[{item.__name__}]"
    return str(hint.__name__)


def _options() -> tuple[Option, ...]:
    hints = typing.get_type_hints(RunConfig)
    out = []
    for f in dataclasses.fields(RunConfig):
        declared = f.metadata.get("option")
        if declared is None:
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        out.append(
            dataclasses.replace(declared, name=f.name, kind=_kind(hints[f.name]), default=default)
        )
    return tuple(out)


#: every setting that is an option, in the order of :class:`RunConfig` (and of --help)
OPTIONS: tuple[Option, ...] = _options()
#: ``dlsuite run``'s flags that are not settings: what the command does with them
COMMAND_FLAGS: tuple[Option, ...] = (
    Option(
        name="config", kind="str", flag="--config", metavar="FILE", config=False,
        help="TOML config file (CLI flags override it)",
        doc="TOML config file, see [The config file](#the-config-file)",
    ),
    Option(
        name="dry_run", kind="bool", default=False, flag="--dry-run", config=False,
        help="print the plan and exit",
        doc="print the plan (one line per task) and exit 0; with `--scheduler slurm` also the "
        "array's elements, the batch script and the `sbatch` command. Config, flags, "
        "framework availability and environment recipes are still checked; no environment is "
        "built, nothing is written",
    ),
    Option(
        name="strict", kind="bool", default=False, flag="--strict", config=False,
        help="exit 1 for every failed correctness check, also one the adapter declares known "
        "(a framework bug, a documented difference from the paper its documentation cites); "
        "without it such a run exits 0 when every failed check is declared",
        doc="exit 1 for every failed correctness check, also one the adapter declares known: a "
        "framework bug (`known_bugs`) or a documented difference of the framework from the "
        "rule or paper its documentation cites (`documented_differences`, "
        "docs/studies/optimizer-differences.md). Without it a run whose every failed check is declared "
        "exits 0 (the summary shows them as `FAIL (known bug)` / `FAIL (documented "
        "difference: ...)`)",
    ),
)  # fmt: skip
#: settings only some schedulers take (a scheduler's ``options`` says which), and their flags
SCHEDULER_OPTIONS = {o.name: str(o.flag) for o in OPTIONS if o.scheduler_option}


def setting(name: str) -> Option:
    """The option ``name`` (a :class:`RunConfig` field or a :data:`COMMAND_FLAGS` flag), e.g.
    for its flag or variable."""
    for o in (*OPTIONS, *COMMAND_FLAGS):
        if o.name == name:
            return o
    raise KeyError(name)
