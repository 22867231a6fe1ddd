"""The plan: the list of tasks a run will execute, built from the resolved RunConfig.

Task ids are content hashes of what identifies a measurement (benchmark, params, framework,
dtype, device, backend, world size, seed), so a resumed run recognises what is already done.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import suite
from suite.errors import ConfigError, PlanError, SuiteError

if TYPE_CHECKING:
    from suite.settings import RunConfig


#: the fields of a task every task id is the digest of (with those its kind adds)
IDENTITY = (
    "level", "benchmark", "params", "framework", "dtype", "device", "backend", "world_size", "seed",
)  # fmt: skip


@dataclass(frozen=True)
class Task:
    level: str
    benchmark: str
    params: dict[str, Any]
    framework: str
    dtype: str
    device: str
    backend: str
    world_size: int
    seed: int
    size_set: str
    source: str
    measure: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 300.0
    peak_tflops: dict[str, float] = field(default_factory=dict)
    launcher: str = "single"
    nodes: int = 1
    dist_backend: str = "auto"
    #: compile operators with XLA (frameworks that can: TensorFlow); part of the identity
    xla: bool = False
    #: a distributed task at one rank that still makes the framework's process group (and
    #: wraps its data parallelism): `--world-size 1 --dist-backend nccl`, so the NCCL path
    #: (init, device tensors, streams, the timer) runs on one GPU; part of the identity
    one_rank_group: bool = False
    #: the training level's data dir and the paths the quiet check reads (not part of the
    #: identity: a user's dataset is in the params)
    data: dict[str, Any] | None = None
    #: telemetry settings (not part of the identity: they do not change what is measured)
    telemetry_interval_ms: float = 100.0
    telemetry: bool = True
    require_quiet: bool = False
    #: ``--resume`` of a sweep stopped part-way: the parameters of what it had left to measure
    #: (``Benchmark.remaining``); the worker runs only those, the task keeps its id (not part
    #: of the identity) and the points measured before stay in results.jsonl
    resume_params: dict[str, Any] | None = None

    @property
    def task_id(self) -> str:
        identity = self._identity()
        if self.xla:
            identity["xla"] = True
        if self.one_rank_group:
            identity.update(one_rank_group=True, dist_backend=self.dist_backend)
        if self.world_size > 1:
            identity.update(
                launcher=self.launcher, nodes=self.nodes, dist_backend=self.dist_backend
            )
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:10]
        world = f"-w{self.world_size}" if self.world_size > 1 or self.one_rank_group else ""
        return f"{self.level}-{self.benchmark}-{self.framework}-{self.dtype}{world}-{digest}"

    def _identity(self) -> dict[str, Any]:
        """The fields every task's id is the digest of, as the task JSON holds them."""
        return {name: getattr(self, name) for name in IDENTITY}

    def document(
        self, *, run_id: str, record_path: str, provenance: dict[str, Any]
    ) -> dict[str, Any]:
        """The task JSON a worker reads (validated against schemas/task.schema.json)."""
        doc: dict[str, Any] = {
            "schema_version": suite.SCHEMA_VERSION,
            "task_id": self.task_id,
            "run_id": run_id,
            **self._identity(),
            "size_set": self.size_set,
            "source": self.source,
            "measure": self.measure,
            "timeout_s": self.timeout_s,
            "record_path": record_path,
            "provenance": provenance,
        }
        if self.resume_params is not None:
            doc["params"] = self.resume_params
        if self.peak_tflops:
            doc["peak_tflops"] = self.peak_tflops
        if self.xla:
            doc["xla"] = True
        if self.one_rank_group:
            doc["one_rank_group"] = True
        if self.benchmark == "strategies":
            doc["strategy"] = self.params["strategy"]
        if self.data is not None:
            doc["data"] = self.data
        doc["telemetry"] = {
            "interval_ms": self.telemetry_interval_ms,
            "sampling": self.telemetry,
            "require_quiet": self.require_quiet,
        }
        doc.update(
            launcher=self.launcher if self.world_size > 1 else "single",
            nodes=self.nodes,
            dist_backend=self.dist_backend,
        )
        return doc


def resolve_levels(requested: list[str]) -> list[str]:
    from suite.levels import LEVELS, benchmarks

    out: list[str] = []
    for level in requested:
        names = list(LEVELS) if level == "all" else [level]
        for name in names:
            benchmarks(name)  # raises ConfigError for an unknown level
            if name not in out:
                out.append(name)
    return out


def check_frameworks(cfg: RunConfig) -> dict[str, str]:
    """Each framework's backend: ``--backend auto`` takes ``local`` when the framework imports
    in this interpreter and its own environment (``venv``) otherwise."""
    from suite import envs
    from suite.adapters import ADAPTERS

    chosen: dict[str, str] = {}
    for fw in cfg.frameworks:
        cls = ADAPTERS.load(fw)  # unknown name: ConfigError listing the known ones
        problem = cls.words_problem() or levels_refused(cfg, cls)  # before a task skips
        if problem:
            raise PlanError(problem)
        ok, why = cls.available()
        backend = cfg.backend
        if backend == "auto":
            backend = "local" if ok else "venv"
        if backend == "local" and not ok:
            raise PlanError(
                f"--framework {fw}: {why}; use --backend venv (or auto) to run it in its own "
                f"environment, or install it here ({_install_hint(fw, cls.distribution)})"
            )
        if backend == "venv":
            envs.requirements_file(fw)  # no recipe: one clear error now
            if cfg.scheduler == "none":  # (a cluster's nodes may see another filesystem)
                # an environments root it could not be built in: exit 2 before anything runs,
                # not failed records after the other frameworks were measured
                envs.check_buildable(fw, envs.envs_root(cfg.envs_dir))
        problem = (
            launcher_missing(cfg, fw, backend)
            or dist_backend_refused(cfg, cls)
            or nodes_refused(cfg, cls)
        )
        if problem:
            raise PlanError(problem)
        if backend == "docker":
            from suite import images

            images.image_ref(fw)  # DLSUITE_IMAGE_TAG/_REPO Docker would refuse: one error now
        chosen[fw] = backend
    return chosen


def launcher_missing(cfg: RunConfig, framework: str, backend: str) -> str:
    """Why ``--launcher`` cannot start ``framework``'s ranks ("" when it can, or when that is
    not known before a run): its command runs a module of a distribution (torchrun:
    ``python -m torch.distributed.run``) that the framework's environment lacks. Known for
    the local backend (this interpreter) and a venv that is built; otherwise every rank of
    every task would fail with "No module named ...", exit 1."""
    import importlib.metadata

    from suite import envs
    from suite.launchers import LAUNCHERS

    if cfg.launcher == "auto" or cfg.world_size < 2:
        return ""
    if not cfg.starts_ranks:  # (the training level's loader at --world-size N too)
        return ""
    dist = LAUNCHERS.load(cfg.launcher).distribution
    if dist is None:
        return ""
    if backend == "local":
        try:
            importlib.metadata.version(dist)
            return ""
        except importlib.metadata.PackageNotFoundError:
            where = "this interpreter (the local backend) does"
    elif backend == "venv":
        env = envs.env_for(framework, envs.envs_root(cfg.envs_dir))
        if not env.built or envs.has_distribution(env, dist):
            return ""
        where = f"{framework}'s environment ({env.path}) does"
    else:
        return ""
    default = _default_launcher(framework)
    others = f"auto ({default} for {framework})" + (" or spawn" if default != "spawn" else "")
    return (
        f"--launcher {cfg.launcher} starts ranks with {dist}, which {where} not have: "
        f"--framework {framework} cannot run under it; use --launcher {others}"
    )


def levels_refused(cfg: RunConfig, cls: Any) -> str:
    """Why ``cls`` runs none of the run's levels ("" when it runs one): `--level training
    --framework horovod` wrote 66 skipped records, exit 0. A run that also chooses a level
    the framework runs keeps its skipped records for the others (`--level all`)."""
    from suite.levels import LEVELS

    levels = resolve_levels(cfg.level)
    if set(levels) & cls.levels:
        return ""
    said = (
        f"{cfg.origin['level']} {','.join(levels)}"
        if cfg.origin.get("level")
        else (f"--level {','.join(levels)} (the default)")
    )
    runs = [level for level in LEVELS if level in cls.levels]
    why = cls.levels_reason or f"{cls.name} runs the {', '.join(runs)} level(s)"
    return (
        f"{said}: --framework {cls.name} runs none of it: {why}; use --level {','.join(runs)}"
        + (" (or run it apart)" if len(cfg.frameworks) > 1 else "")
    )


def dist_backend_refused(cfg: RunConfig, cls: Any) -> str:
    """Why ``--dist-backend`` cannot be ``cls``'s ("" when it can, or when the adapter does not
    declare its backends): known from the class, so a run that names a backend the framework
    has no such communication for stops here, instead of every distributed task of that
    framework being skipped in its ranks after its environment and workers started. Beside a
    chosen framework that has it, a note: that one measures it, this one's tasks skip."""
    if cfg.dist_backend == "auto" or not {"distributed", "all"} & set(cfg.level):
        return ""
    if "distributed" not in cls.levels or _takes_backend(cls, cfg.dist_backend):
        return ""
    accepted = cls.dist_backends or frozenset()
    said = cfg.origin.get("dist_backend") or "--dist-backend"
    names = ["auto", *sorted(accepted)]
    takes = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    fix = "--dist-backend auto"
    if one_rank_group(cfg):  # auto makes no group of one rank: name one it has, or 2 ranks
        fix = " or ".join(f"--dist-backend {b}" for b in sorted(accepted)) or "--world-size 2"
    why = (
        f"{said} {cfg.dist_backend}: --framework {cls.name} has no {cfg.dist_backend} "
        f"communication (it takes {takes})"
    )
    from suite.adapters import ADAPTERS

    others = [
        fw for fw in cfg.frameworks
        if fw != cls.name and _takes_backend(ADAPTERS.load(fw), cfg.dist_backend)
    ]  # fmt: skip
    if others:
        # another chosen framework measures it (`--framework pytorch,tensorflow --dist-backend
        # gloo`: PyTorch on gloo beside TensorFlow, the only way to name PyTorch's backend in
        # such a run): this one's distributed tasks are skipped, as the strategies' are
        note = f"{why}: its distributed tasks are skipped; run it apart with {fix}"
        if note not in cfg.plan_notes:
            cfg.plan_notes.append(note)
        return ""
    return f"{why}; use {fix}"


def _takes_backend(cls: Any, backend: str) -> bool:
    """Whether ``cls`` runs the distributed level with ``--dist-backend backend`` (or leaves
    the backends undeclared, to ``dist_init``)."""
    if "distributed" not in cls.levels:
        return False
    return cls.dist_backends is None or backend in cls.dist_backends


def nodes_refused(cfg: RunConfig, cls: Any) -> str:
    """Why ``--nodes`` above 1 cannot be ``cls``'s distributed level ("" when it can): an
    adapter whose runtime reaches every rank at one host (``single_node``) would start its
    ranks on several nodes and time out in every task. The training level's loader starts no
    process group, so it spans nodes with any framework."""
    if cfg.nodes < 2 or not {"distributed", "all"} & set(cfg.level):
        return ""
    if not cls.single_node or "distributed" not in cls.levels:
        return ""
    said = cfg.origin.get("nodes") or "--nodes"
    why = (
        f"{said} {cfg.nodes}: --framework {cls.name} runs its distributed level on one node "
        f"in this version: {cls.single_node}"
    )
    from suite.adapters import ADAPTERS

    spans = [fw for fw in cfg.frameworks if fw != cls.name and not ADAPTERS.load(fw).single_node]
    if spans or set(resolve_levels(cfg.level)) - {"distributed"}:
        # beside a framework that spans nodes, or levels it runs (`--level all`): its
        # distributed tasks of several ranks are left out (they could only time out), the
        # rest of the run goes on
        note = f"{why}: its distributed tasks of several ranks are left out; run them apart with --nodes 1"
        if note not in cfg.plan_notes:
            cfg.plan_notes.append(note)
        return ""
    return f"{why}; use --nodes 1"


def spans_nodes_refused(cfg: RunConfig, framework: str, level: str, world: int) -> bool:
    """Whether a task of ``framework`` at ``level`` and ``world`` ranks is left out because
    its ranks would span nodes its adapter cannot reach (``nodes_refused``'s note says so)."""
    from suite.adapters import ADAPTERS

    return (
        level == "distributed" and world > 1 and cfg.nodes > 1
        and bool(ADAPTERS.load(framework).single_node)
    )  # fmt: skip


def _check_strategies_mapped(cfg: RunConfig, tasks: list[Task]) -> None:
    """A strategy named with ``--strategy`` that none of the run's frameworks maps: one line
    with each framework's reason and those that map it (exit 2). `--strategy local-sgd
    --framework tensorflow,jax` ran the allreduce baselines and skipped local-sgd in both,
    exit 0, the one thing asked for not measured. A strategy one framework maps keeps the
    others' skipped records (the comparison says who cannot)."""
    from suite import strategies as S
    from suite.adapters import ADAPTERS

    if not cfg.strategies:
        return
    planned = {t.params["strategy"] for t in tasks if t.benchmark == "strategies"}
    said = cfg.origin.get("strategies") or "--strategy"
    for name in cfg.strategies:
        if name == S.BASELINE or name not in planned:
            continue
        why = {fw: ADAPTERS.load(fw).strategy_declined(name) for fw in cfg.frameworks}
        if not all(why.values()):
            continue
        others = [
            fw for fw in ADAPTERS.names()
            if fw not in why and not _quiet_declined(fw, name)
        ]  # fmt: skip
        reasons = "; ".join(f"{fw}: {text}" for fw, text in why.items())
        offer = f"; {', '.join(others)} map{'s' if len(others) == 1 else ''} it" if others else ""
        raise PlanError(f"{said} {name}: no chosen framework maps it ({reasons}){offer}")


def _quiet_declined(framework: str, strategy: str) -> str:
    """``strategy_declined`` for a framework the run did not choose (one whose adapter does
    not load declines: it is not offered)."""
    from suite.adapters import ADAPTERS

    try:
        return ADAPTERS.load(framework).strategy_declined(strategy)
    except SuiteError as exc:
        return str(exc)


def _default_launcher(framework: str) -> str:
    from suite.adapters import ADAPTERS

    return ADAPTERS.load(framework).default_launcher


def _install_hint(framework: str, distribution: str) -> str:
    """The command that installs a framework in this interpreter: its recipe's pins, as its
    environment has them, or its distribution where it has no recipe."""
    from suite import envs

    try:
        reqs = envs.requirements_file(framework)
    except ConfigError:
        return f"pip install {distribution}"
    return f"pip install -r {reqs}"


def resolve_launcher(cfg: RunConfig, framework: str, world: int) -> str:
    """``--launcher auto``: the framework's own launcher (torchrun for PyTorch), else spawn."""
    if world == 1:
        return "single"
    if cfg.launcher != "auto":
        return cfg.launcher
    from suite.adapters import ADAPTERS

    return ADAPTERS.load(framework).default_launcher


def _specs(
    cfg: RunConfig, level: str, name: str, bench: Any
) -> list[tuple[str, str, dict[str, Any]]]:
    """(size_set, source, validated params) for one benchmark, from the config's custom sizes,
    a user ONNX model (--model), or the benchmark's own size set; then the level's filters."""
    key = f"{level}.{name}"
    specs: list[tuple[str, str, dict[str, Any]]] = []
    reads_data = level == "training" and "data" in getattr(bench, "fields", {})
    if key in cfg.sizes:
        for i, params in enumerate(cfg.sizes[key]):
            if reads_data and cfg.data:
                params = {**params, "data": params.get("data") or cfg.data}
            try:
                if key == "distributed.strategies":
                    for _, _, one in _strategy_specs(cfg, [("custom", "", params)]):
                        specs.append(
                            ("custom", "custom size from the config file", bench.validate(one))
                        )
                else:
                    one = bench.validate(params)
                    if level in ("network", "distributed") and "model" in one:
                        # a user's model file read now, as --model's is: a missing file, a
                        # dimension left dynamic, an input it cannot bind exit 2 before any run
                        bench.user_sizes(
                            one["model"], [one["batch"]], cfg.size_set, one.get("dims")
                        )
                    specs.append(("custom", "custom size from the config file", one))
            except ConfigError as exc:
                raise ConfigError(f"{cfg.config_file}: [{key}] sizes[{i}]: {exc}") from None
        if key == "distributed.strategies":
            specs = _with_baselines(specs, bench)
        if reads_data:
            specs = _data_specs(cfg, name, bench, specs, custom=True)
        return specs
    if level == "operator" and cfg.operator_sizes:
        from suite.levels.operator.from_network import size_specs

        return [
            ("custom", s.source, bench.validate(s.params))
            for s in size_specs(cfg.operator_sizes, cfg.size_set, cfg.batch, cfg.model_dims).get(
                name, []
            )
        ]
    if level == "network" and cfg.model and name in ("train", "infer", "agreement"):
        # --compile as for the zoo (it was dropped here: an eager run, nothing said); agreement
        # compares every framework's eager network, as for the zoo
        compiled = {"compile": True} if cfg.compile and name != "agreement" else {}
        return [
            ("custom", s.source, bench.validate({**s.params, **compiled}))
            for s in bench.user_sizes(cfg.model, cfg.batch, cfg.size_set, cfg.model_dims)
        ]
    if level == "network" and cfg.model:
        return []  # digits trains its own MLP on scikit-learn's digits
    if level == "distributed" and cfg.model and name == "data_parallel":
        return [
            ("custom", s.source, bench.validate(s.params))
            for s in bench.user_sizes(cfg.model, cfg.batch, cfg.size_set, cfg.model_dims)
        ]
    if level == "distributed" and cfg.model and name == "strategies":
        return []  # the strategies cut and compress the zoo's networks; the sweeps measure links
    for s in bench.sizes(cfg.size_set):
        if s.kit:
            continue  # the kit's case, not the quick plan's (SizeSpec)
        params = dict(s.params)
        if cfg.networks and "network" in params and params["network"] not in cfg.networks:
            continue  # network level and data-parallel training alike
        if level == "network":
            if cfg.compile and name in ("train", "infer"):  # agreement runs eager
                params["compile"] = True
        if reads_data and cfg.data:
            params["data"] = cfg.data  # --data: the user's dataset instead of the suite's
        specs.append((cfg.size_set, s.source, params))
    if level == "distributed" and name == "strategies":
        specs = _strategy_specs(cfg, specs)
    if level == "network" and cfg.batch and name != "digits":
        seen: set[str] = set()
        rebatched = []
        for size_set, source, params in specs:
            for b in cfg.batch:
                p = {**params, "batch": b}
                k = json.dumps(p, sort_keys=True)
                if k not in seen:
                    seen.add(k)
                    rebatched.append((size_set, source, p))
        specs = rebatched
    out = []
    for size_set, source, params in specs:
        try:
            out.append((size_set, source, bench.validate(params)))
        except ConfigError as exc:
            raise ConfigError(
                f"{exc} (from {', '.join(_flag_sources(cfg)) or 'the built-in sizes'})"
            ) from None
    if reads_data:
        out = _data_specs(cfg, name, bench, out, custom=False)
    return out


#: the fewest batches per rank a loader epoch is planned with (the window statistic's
#: windows: suite/levels/training/pipeline.py)
MIN_LOADER_BATCHES = 10


def _data_specs(
    cfg: RunConfig, name: str, bench: Any, specs: list[tuple[str, str, dict[str, Any]]],
    custom: bool,
) -> list[tuple[str, str, dict[str, Any]]]:  # fmt: skip
    """The training level's data-reading sizes, planned from what the data holds: only the
    formats ``--data`` holds (and ``--format`` names; one it does not hold is a ConfigError),
    a batch the dataset gives enough batches of, ``--images`` and the label base in the
    parameters, and "the dataset at PATH" as the source."""
    found = cfg.data_found
    held = list(found["formats"]) if found else None
    if cfg.formats and held is not None:
        missing = [f for f in cfg.formats if f not in held]
        if missing:
            raise ConfigError(
                f"--format {','.join(missing)}: {_described(found)} holds "
                f"{', '.join(held)}, not {', '.join(missing)}; drop --format (the run reads what "
                f"the dataset holds) or give --data a {missing[0]} dataset"
            )
    out = []
    for i, (size_set, source, params) in enumerate(specs):
        found, held = cfg.data_found, (list(cfg.data_found["formats"]) if cfg.data_found else None)
        if custom and params.get("data") and params["data"] != cfg.data:
            # a size's own dataset (`data = PATH` in the config file) is detected and checked
            # now, as --data's is: a missing path or a format it does not hold exits 2 here,
            # not as a failed or skipped task
            found = _size_data(cfg, name, i, params)
            held = list(found["formats"])
            params = {**params, "data": found["path"]}
        wanted = cfg.formats or held
        fmt = params["format"]
        if custom and held is not None and fmt not in held:
            raise ConfigError(
                f"{cfg.config_file}: [training.{name}] sizes[{i}]: format = {fmt}, but "
                f"{_described(found)} holds {', '.join(held)}; set format = {held[0]}"
            )
        if wanted is not None and fmt not in wanted:
            continue
        p = dict(params)
        if cfg.images is not None and p.get("images") is None:
            p["images"] = cfg.images
        if found is None:
            try:
                out.append((size_set, source, bench.validate(p) if p != params else params))
            except ConfigError as exc:  # --images over a size's own counts
                raise ConfigError(f"--images {cfg.images}: {exc}") from None
            continue
        p["dataset"] = None  # the user's, not a size of the suite's
        if cfg.label_base is not None and found["layout"] in ("tfrecord", "recordio", "webdataset"):
            p["label_base"] = cfg.label_base  # else the worker detects it as planning did
        samples = min(found["samples"], p["images"]) if p.get("images") else found["samples"]
        world = cfg.world_size if cfg.world_size_given and name == "loader" else 1
        per_rank = samples // world
        if world > 1 and found.get("shard_samples"):
            # each rank reads whole shards (every world-th): the fewest a rank reads, not an
            # even share (one shard for two ranks left rank 1 an epoch of none, a failed task)
            from suite.levels.training.dataset import rank_samples

            shards = found["shard_samples"]
            ranks = rank_samples(shards, p.get("images"), cfg.seed, world)
            if min(ranks) == 0:
                idle = [r for r, n in enumerate(ranks) if n == 0]
                read = len([n for n in shards if n]) if not p.get("images") else None
                raise ConfigError(
                    f"--world-size {world}: {_described(found)} is read in whole shards, each "
                    f"of the {world} ranks taking its own (Dataset.shard, WebDataset's node "
                    "split), and "
                    + (f"its {len(shards)} shard(s)" if read is not None else
                       f"the shards --images {p['images']} draws")
                    + f" leave rank{'s' if len(idle) > 1 else ''} "
                    f"{', '.join(map(str, idle))} none; split it into at least {world} shards, "
                    "or give a smaller --world-size"
                    + ("" if read is not None else " or more --images")
                )  # fmt: skip
            per_rank = min(ranks)
        batches = p["warmup"] + p["steps"] if name == "feed" else MIN_LOADER_BATCHES
        batch = min(p["batch"], per_rank // batches)
        if batch < 1:
            why = (f"{name}: not planned for {_described(found)}: {per_rank} samples per rank "
                   f"give fewer than the {batches} batches it reads (warmup + steps)"
                   if name == "feed" else
                   f"loader: not planned for {_described(found)}: {per_rank} samples per rank "
                   f"give fewer than {batches} batches of one")  # fmt: skip
            if custom or (cfg.benchmarks and name in cfg.benchmarks):
                raise ConfigError(why + "; give a larger dataset (or fewer --images, steps)")
            cfg.plan_notes.append(why)
            continue
        note = ""
        if batch != p["batch"] and custom:  # the user's own size: theirs to change
            raise ConfigError(
                f"{cfg.config_file}: [training.{name}] sizes[{i}]: batch = {p['batch']} gives "
                f"{per_rank // p['batch']} of the {batches} batches it needs from "
                f"{_described(found)} ({per_rank} samples per rank); set batch = {batch} or less"
            )
        if batch != p["batch"]:
            k = per_rank // p["batch"]
            note = (f"; batch {batch}: the size's {p['batch']} gives {k} "
                    f"batch{'' if k == 1 else 'es'} of its {per_rank} samples per rank, "
                    f"fewer than {batches}")  # fmt: skip
            p["batch"] = batch
        subset = ""
        if p.get("images") and p["images"] < found["samples"]:
            subset = f", {p['images']} of them read"
            if found.get("layout") == "recordio":  # ImageRecordIter reads whole parts
                n, m = found["samples"], found["samples"] // p["images"]
                subset = (f", all {n} read (ImageRecordIter reads whole parts of the .rec)"
                          if m == 1 else f", one part of {m} read ({-(-n // m)} records)")  # fmt: skip
        if p.get("images") and p["images"] > found["samples"]:
            asked = (f"--images {p['images']}" if cfg.images == p["images"]
                     else f"[training.{name}] images = {p['images']}")  # fmt: skip
            more = (f"{asked} is more than {_described(found)} holds: all {found['samples']:,} "
                    "are read (the record's pipeline.dataset.subset says what was delivered)")  # fmt: skip
            if more not in cfg.plan_notes:
                cfg.plan_notes.append(more)
            subset = f", all {found['samples']:,} read ({p['images']} asked)"
        out.append((size_set, f"{_described(found)}{subset}{note}", bench.validate(p)))
    return out


def _size_data(cfg: RunConfig, name: str, i: int, params: dict[str, Any]) -> dict[str, Any]:
    """The dataset a config file's size names (``data = PATH``), detected at planning: its
    path resolved (relative to the current directory, as --data's) and what it holds."""
    from suite.levels.training.dataset import inspect_user_data

    path = str(Path(params["data"]).expanduser().resolve())
    base = params.get("label_base")
    try:
        found = inspect_user_data(path, cfg.data_dir, cfg.label_base if base is None else base)
    except ConfigError as exc:
        said = str(exc).removeprefix("--data ")  # the user wrote data = PATH, not --data
        raise ConfigError(
            f"{cfg.config_file}: [training.{name}] sizes[{i}]: data: {said}"
        ) from None
    return found.to_dict()


def _described(found: dict[str, Any] | None) -> str:
    from suite.levels.training.dataset import UserData

    return UserData(**found).describe() if found else "the suite's dataset"


def _strategy_specs(
    cfg: RunConfig, specs: list[tuple[str, str, dict[str, Any]]]
) -> list[tuple[str, str, dict[str, Any]]]:
    """One spec per strategy (``--strategy``, else every strategy), the allreduce baseline
    first: the host compares every other strategy with it as its records arrive."""
    from suite import strategies as S

    wanted = cfg.strategies or list(S.STRATEGIES)
    names = [S.BASELINE] + [n for n in wanted if n != S.BASELINE]
    out = []
    for size_set, source, params in specs:
        if "strategy" in params:  # a custom size naming its strategy
            out.append((size_set, source, params))
            continue
        out += [(size_set, source, {**params, "strategy": n}) for n in names]
    return out


def _with_baselines(
    specs: list[tuple[str, str, dict[str, Any]]], bench: Any
) -> list[tuple[str, str, dict[str, Any]]]:
    """Custom strategies sizes with the allreduce baseline of each network added where the
    config names none, baselines first."""
    from suite import strategies as S

    def shared(p: dict[str, Any]) -> str:
        return json.dumps(
            {k: v for k, v in p.items() if k not in ("strategy", "options")}, sort_keys=True
        )

    have = {shared(p) for _, _, p in specs if p["strategy"] == S.BASELINE}
    added = []
    for size_set, _source, p in specs:
        if shared(p) not in have:
            have.add(shared(p))
            base = {k: v for k, v in p.items() if k not in ("strategy", "options")}
            added.append((size_set, "allreduce baseline of a custom size", bench.validate(base)))
    out = added + specs
    return sorted(out, key=lambda s: s[2]["strategy"] != S.BASELINE)


def _flag_sources(cfg: RunConfig) -> list[str]:
    return [
        f
        for f, v in (
            ("--batch", cfg.batch),
            ("--network", cfg.networks),
            ("--compile", cfg.compile),
        )
        if v
    ]


def _one_rank_baseline_once(cfg: RunConfig, tasks: list[Task]) -> list[Task]:
    """data_parallel at 1 rank: strong and weak scaling at the same batch are one
    configuration (the one rank holds the whole batch either way), so it is measured once and
    is both scalings' baseline (``suite.aggregate.scaling_key`` leaves ``scaling`` out).
    Measured twice, the two baselines of one run differed 11x under load (0.34 ms against
    3.8 ms a step) and the two efficiencies with them (14% and 295%). The first of the two
    stays; the plan says which was left out."""
    seen: dict[str, Task] = {}
    out: list[Task] = []
    merged: dict[tuple[str, str], list[str]] = {}  # (left out, kept): their frameworks
    for t in tasks:
        if t.level == "distributed" and t.benchmark == "data_parallel" and t.world_size == 1:
            identity = t._identity()
            identity["params"] = {k: v for k, v in t.params.items() if k != "scaling"}
            identity["one_rank_group"] = t.one_rank_group
            key = json.dumps(identity, sort_keys=True)
            kept = seen.setdefault(key, t)
            if kept is not t:
                who = merged.setdefault((_label(t), _label(kept)), [])
                if t.framework not in who:
                    who.append(t.framework)
                continue
        out.append(t)
    for (left, kept_label), frameworks in merged.items():
        note = (
            f"data_parallel {left} at 1 rank is the same configuration as {kept_label} at 1 "
            f"rank: measured once ({', '.join(frameworks)}), the 1-rank baseline of both "
            "scalings"
        )
        if note not in cfg.plan_notes:  # a plan built twice from one config says it once
            cfg.plan_notes.append(note)
    return out


def _label(t: Task) -> str:
    from suite.levels import load_benchmark

    return str(load_benchmark(t.level, t.benchmark).label(t.params))


def _world_sizes(cfg: RunConfig, level: str, name: str) -> list[int]:
    """Collectives run at --world-size; data-parallel training also at 1 rank, the scaling
    baseline measured in the same run; the other levels on one process."""
    if level == "training":  # a loader reads its shard on each of --world-size ranks
        return [cfg.world_size] if cfg.world_size_given and name == "loader" else [1]
    if level != "distributed":
        return [1]
    if name == "data_parallel":
        return sorted({1, cfg.world_size})
    if cfg.world_size < 2 and not one_rank_group(cfg):
        what = "strategies exchange between ranks" if name == "strategies" else "collectives"
        raise ConfigError(
            f"--world-size {cfg.world_size}: {what}; they need at least 2 ranks, or a process "
            f"group of one rank to run the framework's path alone: {_one_rank_fix(cfg)}"
        )
    return [cfg.world_size]


def _one_rank_fix(cfg: RunConfig) -> str:
    """What makes ``--world-size 1`` run the distributed level for the chosen frameworks: a
    ``--dist-backend`` they all take, or 2 ranks where one makes no group of one rank (MXNet's
    kvstore takes no backend: "add --dist-backend nccl" was refused next)."""
    from suite.adapters import ADAPTERS

    takes: dict[str, frozenset[str] | None] = {}
    for fw in cfg.frameworks:
        cls = ADAPTERS.load(fw)
        if "distributed" in cls.levels:
            takes[fw] = cls.dist_backends  # None: undeclared, left to its dist_init
    none = [fw for fw, b in takes.items() if b is not None and not b]
    if none:
        return (f"use --world-size 2 (--framework {', '.join(none)} makes no process group of "
                "one rank: it takes no --dist-backend)")  # fmt: skip
    declared = [b for b in takes.values() if b is not None]
    common = frozenset.intersection(*declared) if declared else frozenset({"gloo", "nccl"})
    if {"gloo", "nccl"} <= common:
        return "add --dist-backend nccl (gloo on a CPU)"
    if common == {"nccl"}:  # TensorFlow's: a CPU has no NCCL, its tasks would skip there
        return "add --dist-backend nccl on a GPU (on a CPU, use --world-size 2)"
    if common:
        return f"add --dist-backend {sorted(common)[0]}"
    each = "; ".join(f"{fw}: {', '.join(sorted(b))}" for fw, b in takes.items() if b)
    return (f"the chosen frameworks share no --dist-backend ({each}): run each apart with one "
            "of its own, or use --world-size 2")  # fmt: skip


def one_rank_group(cfg: RunConfig) -> bool:
    """`--world-size 1` with a named --dist-backend: the distributed level's tasks at one rank
    make the framework's process group (NCCL on a GPU: its init, device buffers, streams and
    the timer run at least once where only one GPU is lent)."""
    return cfg.world_size == 1 and cfg.world_size_given and cfg.dist_backend != "auto"


def _dtypes(cfg: RunConfig, level: str, name: str) -> list[str]:
    # The distributed level measures fp32 (collectives move fp32; DDP trains in fp32), and
    # cross-framework agreement compares fp32 results.
    if (level == "distributed" or name == "agreement") and "fp32" in cfg.dtypes:
        return ["fp32"]
    if level == "distributed":
        return _distributed_without_fp32(cfg)
    if level == "training" and name == "loader":
        return ["fp32"]  # a loader's output is fp32 whatever the run's dtypes
    if level == "training" and name == "feed":
        # the network's training precision: fp32, or the first dtype asked for when fp32 is
        # not (`--dtype bf16` trains mixed bf16, as a GPU would)
        return ["fp32"] if "fp32" in cfg.dtypes else [cfg.dtypes[0]]
    return list(cfg.dtypes)


def _distributed_without_fp32(cfg: RunConfig) -> list[str]:
    """The distributed level at dtypes without fp32 (`--dtype bf16`): its tasks were planned
    at bf16 and every one skipped in its worker ("runs in fp32 for now"), ranks started for
    each, exit 0. Alone, the level is refused (exit 2); beside other levels, it plans nothing
    and a note says so."""
    said = f"{cfg.origin.get('dtypes') or '--dtype'} {','.join(cfg.dtypes)}"
    why = "the distributed level measures fp32 only (collectives move fp32, data-parallel "
    if resolve_levels(cfg.level) == ["distributed"]:
        raise ConfigError(f"{said}: {why}training runs in fp32); add fp32 to it")
    note = f"{said}: {why}training runs in fp32), so no distributed task is planned; add fp32"
    if note not in cfg.plan_notes:
        cfg.plan_notes.append(note)
    return []


def _data_benchmarks(cfg: RunConfig, wanted: list[str]) -> list[str]:
    """``--data`` on the training level: the benchmarks that read data (loader, feed); named
    ones that read none are an error when nothing else would read it."""
    from suite.levels import load_benchmark

    reading = [b for b in wanted if "data" in getattr(load_benchmark("training", b), "fields", {})]
    if cfg.benchmarks is None:
        return reading
    if not reading:  # e.g. --level training,operator --benchmark gemm: nothing would read it
        said = cfg.origin.get("data") or "--data"
        raise ConfigError(
            f"{said} {cfg.data}: no chosen benchmark reads a dataset "
            f"({', '.join(cfg.benchmarks)}); the training level's loader and feed do "
            "(--benchmark loader,feed), or drop --data"
        )
    return wanted


def _task_data(cfg: RunConfig, level: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """A training task's data: the data dir and the paths whose storage the quiet check
    reads before the task touches them."""
    if level != "training":
        return None
    from suite.levels.training.dataset import data_paths

    paths = data_paths(params, cfg.data_dir, cfg.seed) if "dataset" in params else []
    return {"dir": cfg.data_dir, "dir_source": cfg.data_dir_source, "paths": paths}


def _note_oversubscribed(cfg: RunConfig, tasks: list[Task]) -> None:
    """A plan note when a run here, on the CPU, starts more ranks on this node than it has
    cores: the ranks share cores, so their scaling efficiency measures the sharing."""
    import shutil

    from suite.cpuinfo import usable_cores

    on_cpu = cfg.device == "cpu" or (cfg.device == "auto" and shutil.which("nvidia-smi") is None)
    if cfg.scheduler != "none" or not on_cpu or cfg.nodes != 1:
        return
    worlds = [t.world_size for t in tasks if t.world_size > 1]
    cores = usable_cores()
    if worlds and max(worlds) > cores:
        cfg.plan_notes.append(
            f"{max(worlds)} ranks on this machine's {cores} usable cores: oversubscribed, the "
            "ranks take turns on the cores, so the distributed level's rates and scaling "
            f"efficiencies measure that, not the exchange; use --world-size {cores} or fewer "
            "here, and `dlsuite project` past this machine"
        )


def _check_world_read(cfg: RunConfig, tasks: list[Task]) -> None:
    """``--world-size N`` (N > 1) that no chosen benchmark runs at: the run would go on one
    process and say nothing. Typed (a flag or the config file): one line, exit 2; from
    ``DLSUITE_WORLD_SIZE``, a standing setting: a plan note. A training run whose loader takes
    it while its feed or optimizer tasks do not: a note saying which."""
    if not cfg.world_size_given or cfg.world_size < 2:
        return
    said = f"{cfg.origin.get('world_size') or '--world-size'} {cfg.world_size}"
    single = sorted({t.benchmark for t in tasks if t.level == "training" and t.world_size == 1})
    if any(t.world_size > 1 for t in tasks):
        if single:
            cfg.plan_notes.append(
                f"{said}: the training level's {' and '.join(single)} "
                f"{'runs' if len(single) == 1 else 'run'} on one process; its loader reads on "
                "each rank"
            )
        return
    from suite.settings import OPTIONS

    env = next(o.env for o in OPTIONS if o.name == "world_size")
    why = (f"{said}: no chosen benchmark runs on several ranks (the distributed level's do, "
           "and the training level's loader)")  # fmt: skip
    if cfg.origin.get("world_size") == env:  # a standing setting
        cfg.plan_notes.append(f"{why}: not read by this run")
        return
    raise ConfigError(f"{why}; add them, or drop it")


def check_device_here(cfg: RunConfig) -> None:
    """``--device cuda`` for a run whose workers start on this host (no scheduler, and not
    ``--launcher srun``, whose ranks run on an allocation's nodes) when this host shows no GPU:
    one line now, not a failed record per task. A run submitted to a scheduler is not judged
    by the host that submits it (a login node without a GPU sends work to GPU nodes), nor one
    whose ranks span ``--nodes`` (a multi-node launcher's: horovodrun -H takes the
    allocation's hosts, reached over ssh from a login node inside salloc)."""
    if cfg.device != "cuda" or cfg.scheduler != "none" or cfg.launcher == "srun":
        return
    if cfg.nodes > 1 and cfg.starts_ranks:
        return
    from suite.devices import no_gpu_here

    why = no_gpu_here()
    if why:
        said = cfg.origin.get("device") or "--device"
        raise ConfigError(
            f"{said} cuda: {why}, and this run's workers start here (no --scheduler); use "
            "--device cpu (or auto: a GPU where there is one), or send the run to GPU nodes "
            "with --scheduler slurm --site SITE"
        )


def build(cfg: RunConfig) -> list[Task]:
    from suite.levels import LEVELS, benchmark_names, load_benchmark

    levels = resolve_levels(cfg.level)
    check_device_here(cfg)
    backends = check_frameworks(cfg)
    known = {f"{level}.{b}" for level in levels for b in benchmark_names(level)}
    for key in cfg.sizes:
        level, _, name = key.partition(".")
        if key not in known and level in LEVELS and name in benchmark_names(level):
            # a benchmark of a level this run does not select (the default is operator)
            raise ConfigError(
                f"{cfg.config_file}: [{key}] is a benchmark of the {level} level, which this "
                f"run does not select (level: {', '.join(levels)}); add --level {level} (or "
                f'level = "{level}" in [run])'
            )
        if key not in known:
            raise ConfigError(
                f"{cfg.config_file}: [{key}] is not a benchmark; use one of: {', '.join(sorted(known))}"
            )
    if cfg.operator_sizes and "operator" not in levels:
        raise ConfigError(
            f"--sizes {cfg.operator_sizes}: only the operator level takes its sizes from a "
            "network; add operator to --level (or drop --sizes)"
        )
    both = [k for k in sorted(cfg.sizes) if k.startswith("operator.") and
            (cfg.benchmarks is None or k.partition(".")[2] in cfg.benchmarks)]  # fmt: skip
    if cfg.operator_sizes and both:  # the file's sizes were taken and --sizes went unread
        raise ConfigError(
            f"{cfg.origin.get('operator_sizes') or '--sizes'} {cfg.operator_sizes} and "
            f"{cfg.config_file}'s {', '.join(f'[{k}]' for k in both)} both give operator "
            "sizes; drop one (or choose the other benchmarks with --benchmark)"
        )
    if cfg.networks:
        from suite.onnx import zoo

        for n in cfg.networks:
            zoo.get(n)  # unknown: ConfigError listing the zoo
    for key, flag in (("benchmarks", "--benchmark"), ("frameworks", "--framework"),
                      ("dtypes", "--dtype")):  # fmt: skip
        chosen = getattr(cfg, key) or []
        twice = sorted({v for v in chosen if chosen.count(v) > 1})
        if twice:  # else "the size ... is listed twice" below, naming the wrong thing
            raise ConfigError(
                f"{cfg.origin.get(key) or flag} {','.join(chosen)}: {', '.join(twice)} "
                f"{'is' if len(twice) == 1 else 'are'} listed twice; remove the duplicate"
            )
    all_names = {b for level in levels for b in benchmark_names(level)}
    said = cfg.origin.get("benchmarks") or "--benchmark"  # the flag, the variable or the file
    for b in cfg.benchmarks or []:
        if b not in all_names:
            raise ConfigError(
                f"{said} {b!r}: no such benchmark in level(s) {', '.join(levels)}; "
                f"choose from: {', '.join(sorted(all_names))}"
            )
    tasks: list[Task] = []
    for level in levels:
        available = benchmark_names(level)
        wanted = [b for b in (cfg.benchmarks or available) if b in available]
        if level == "training" and cfg.data:
            wanted = _data_benchmarks(cfg, wanted)
        for name in wanted:
            bench = load_benchmark(level, name)
            for size_set, source, params in _specs(cfg, level, name, bench):
                worlds = _world_sizes(cfg, level, name)
                if size_set != "custom":  # the suite's own size: made to split over the ranks
                    params, fitted = bench.fit_world(params, max(worlds))
                    if fitted:
                        source = f"{source}; {fitted}"
                        note = f"{name} {bench.label(params)}: the suite's {fitted}"
                        if note not in cfg.plan_notes:
                            cfg.plan_notes.append(note)
                for world in worlds:
                    bench.check_world(params, world)  # e.g. an indivisible batch: exit 2 now
                    for fw in cfg.frameworks:
                        if spans_nodes_refused(cfg, fw, level, world):
                            continue  # nodes_refused's note says why
                        for dtype in _dtypes(cfg, level, name):
                            tasks.append(
                                Task(
                                    level=level,
                                    benchmark=name,
                                    params=params,
                                    framework=fw,
                                    dtype=dtype,
                                    device=cfg.device,
                                    backend=backends[fw],
                                    world_size=world,
                                    seed=cfg.seed,
                                    size_set=size_set,
                                    source=source,
                                    measure=cfg.measure_settings(),
                                    timeout_s=cfg.task_timeout,
                                    peak_tflops=cfg.peak_tflops,
                                    launcher=resolve_launcher(cfg, fw, world),
                                    nodes=cfg.nodes if world > 1 else 1,
                                    dist_backend=cfg.dist_backend,
                                    xla=cfg.xla and level == "operator",
                                    one_rank_group=level == "distributed"
                                    and world == 1
                                    and one_rank_group(cfg),
                                    telemetry_interval_ms=cfg.telemetry_interval_ms,
                                    telemetry=cfg.telemetry,
                                    require_quiet=cfg.require_quiet,
                                    data=_task_data(cfg, level, params),
                                )
                            )
    tasks = _one_rank_baseline_once(cfg, tasks)
    ids: dict[str, Task] = {}
    for t in tasks:
        if t.task_id in ids:
            raise ConfigError(
                f"{t.benchmark}: the size {t.params} is listed twice; remove the duplicate"
            )
        ids[t.task_id] = t
    if not tasks:
        if cfg.plan_notes:  # --data too small for every benchmark that reads it: say why
            raise ConfigError("; ".join(cfg.plan_notes))
        raise ConfigError(
            "the selection matches no task (check --benchmark, --network and --model against `dlsuite list`)"
        )
    if cfg.benchmarks:
        # sizes kept in the file for a benchmark this run leaves out (--benchmark picks a few):
        # said, not silently dropped (a misspelt or forgotten name in [run] benchmarks)
        left = [key for key in sorted(cfg.sizes) if key.partition(".")[2] not in cfg.benchmarks]
        if left:
            cfg.plan_notes.append(
                f"{cfg.config_file}: the sizes of {', '.join(f'[{k}]' for k in left)} are not "
                f"run: not among the chosen benchmarks ({said} {', '.join(cfg.benchmarks)}); "
                "add them there to run them"
            )
    _note_oversubscribed(cfg, tasks)
    _check_world_read(cfg, tasks)
    _check_strategies_mapped(cfg, tasks)
    if cfg.strategies and not any(t.benchmark == "strategies" for t in tasks):
        # `--benchmark data_parallel --strategy fp16` trained uncompressed, saying nothing
        said = cfg.origin.get("strategies") or "--strategy"
        cfg.plan_notes.append(
            f"{said} {','.join(cfg.strategies)}: only the distributed level's strategies "
            "benchmark takes strategies, and this run plans none; it is ignored (add "
            "--level distributed --benchmark strategies to run them)"
        )
    if cfg.data_found and any(t.params.get("data") == cfg.data for t in tasks):
        for note in cfg.data_found.get("notes") or []:  # a dataset of one class, ...
            cfg.plan_notes.append(f"--data {cfg.data}: {note}")
    if "training" in levels:  # the datasets the tasks will make fit in the data dir, or exit 2
        from suite.levels.training.dataset import check_space

        check_space(tasks, cfg.data_dir, cfg.seed)
    return tasks
