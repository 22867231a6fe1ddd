"""The adapter contract: the small vocabulary every framework implements.

Benchmarks are framework-neutral compositions of these words, so adding a benchmark touches no
adapter unless it needs a new word, and adding a framework touches no benchmark. This module
imports no framework; an adapter imports its framework lazily (inside ``setup``), so listing
adapters and checking availability never loads one.

``Tensor`` is whatever the framework uses; the suite never looks inside one.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, ClassVar

import numpy as np

from suite import cpuinfo
from suite import strategies as S
from suite.adapters.data_words import DataWords
from suite.adapters.missing import missing_because
from suite.adapters.optimizer_words import OptimizerWords
from suite.dtypes import DTYPES
from suite.errors import UnsupportedError

Tensor = Any

#: the operator words (one method each on Adapter)
OPERATOR_WORDS: frozenset[str] = frozenset(
    {"matmul", "conv2d", "batch_norm", "layer_norm", "softmax", "gelu", "attention"}
)
#: every word an adapter can declare: the operators, their backward (``vjp``), and the
#: network, distributed and optimizer vocabularies
ALL_WORDS: frozenset[str] = OPERATOR_WORDS | {"vjp", "network", "distributed", "optimizer"}
#: the agreement benchmark's reference, a column of every agreement matrix
#: (suite/levels/network/agreement.py): no adapter may take the name
AGREEMENT_REFERENCE = "onnxruntime"
#: registry names no adapter may take: name -> what the suite means by it
RESERVED_NAMES: dict[str, str] = {
    AGREEMENT_REFERENCE: "the agreement matrices compare every framework with onnxruntime's "
    "logits under that name, and an adapter of the name would be paired with itself",
}
#: word -> the methods an adapter that declares it overrides (``distributed`` leaves out
#: ``barrier``, whose default is ``agree_max(0)``; ``optimizer``'s other methods delegate to
#: the handle ``optimizer_build`` returns: suite/adapters/optimizer_words.py)
WORD_METHODS: dict[str, tuple[str, ...]] = {
    **{w: (w,) for w in sorted(OPERATOR_WORDS)},
    "vjp": ("vjp",),
    "network": (
        "build_network",
        "forward",
        "train_step",
        "network_parameters",
        "labels_from_numpy",
    ),
    "distributed": (
        "dist_init",
        "dist_shutdown",
        "agree_max",
        "allreduce",
        "allgather",
        "broadcast",
        "reduce_scatter",
        "data_parallel",
        "train_step_no_sync",
        "copy_from_numpy",
    ),
    "optimizer": ("optimizer_build",),
}


def _not_implemented(adapter: Any, word: str, method: str = "") -> NotImplementedError:
    """The error a word's method raises where the adapter does not override it: naming the
    adapter, the word (and the method, where the word has several) and, where the adapter
    says in ``missing_words``, why it leaves the word out."""
    name = getattr(adapter, "name", "?")
    what = f"Adapter.{method} (the word {word!r})" if method else f"the word {word!r}"
    if word in getattr(adapter, "words", ()):
        why = f"; it declares {word!r} in words, so it must override Adapter.{method or word}"
    else:
        why = missing_because(type(adapter), [word])
    return NotImplementedError(f"{name} does not implement {what}{why}")


@dataclass
class DeviceInfo:
    """What a record says about the device a task ran on."""

    kind: str  # "cpu" | "gpu"
    name: str
    count: int
    peak_tflops: dict[str, float] = field(default_factory=dict)
    peak_source: str = ""
    driver: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "name": self.name,
            "count": self.count,
            "peak_tflops": dict(self.peak_tflops),
            "peak_source": self.peak_source,
            "driver": self.driver,
        }
        out.update(self.extra)
        return out


@dataclass(frozen=True)
class NetworkOptions:
    """How a network is built and trained; part of the task parameters."""

    lr: float = 0.01
    momentum: float = 0.9
    channels_last: bool = True
    compile: bool = False
    #: dtype "bf16"/"fp16" at the network level means mixed precision (autocast; fp32 weights),
    #: with a dynamic loss scaler for fp16
    amp: bool = False
    #: seeds the framework's own generator (dropout masks), so a task is reproducible
    seed: int = 0


class NetworkWords:
    """The network-level vocabulary (mixed into Adapter). ``Handle`` is adapter-defined.

    An adapter lists the ONNX ops it maps in ``onnx_ops``; a graph with any other op is
    skipped with "unsupported op X in node Y" before anything is built. ``onnx_ops`` is a
    class attribute, so declaring it imports no framework: ``CORE_OPS`` (suite/onnx/ops.py)
    for every op the importer leaves, or a subset of it (``CORE_OPS - {"Einsum", ...}`` or
    an explicit ``frozenset({...})``) for an adapter that maps only part of them.
    """

    onnx_ops: ClassVar[frozenset[str]] = frozenset()
    #: the network options (``channels_last``, ``compile``) this adapter's builder takes and
    #: leaves as they are, each with why: a ``train``/``infer`` record that asks for one says
    #: so (``work.options_not_applied``), so a "compiled" or channels-last label never stands
    #: for a run that was neither
    network_options_ignored: ClassVar[dict[str, str]] = {}

    def network_options_not_applied(self, options: NetworkOptions) -> dict[str, str]:
        """The options set in ``options`` that the built network does not follow, with why
        (by default the set ones of ``network_options_ignored``)."""
        return {k: why for k, why in self.network_options_ignored.items() if getattr(options, k)}

    def build_network(self, model: Any, dtype: str, options: NetworkOptions) -> Any:
        """Map the ONNX ``model`` to a native network with the *same initializer values*.

        The base class declines (``UnsupportedError``, a skipped record): an adapter without
        the network words never builds a network, whoever asks."""
        raise UnsupportedError(
            f"{getattr(self, 'name', '?')} does not implement the network words"
            + missing_because(type(self), ["network"])
        )

    def forward(self, net: Any, x: Tensor) -> Tensor:
        """Inference-mode logits (dropout off, batch norm with running statistics)."""
        raise _not_implemented(self, "network", "forward")

    def train_step(self, net: Any, x: Tensor, y: Tensor) -> Tensor:
        """One SGD-with-momentum step on softmax cross-entropy; returns the loss as a device
        tensor (not synchronised, so timing loops stay asynchronous)."""
        raise _not_implemented(self, "network", "train_step")

    def network_parameters(self, net: Any) -> dict[str, np.ndarray]:
        """Current trainable values as float64 arrays, keyed by ONNX initializer name."""
        raise _not_implemented(self, "network", "network_parameters")

    def loss_scale(self, net: Any) -> float | None:
        """The current dynamic loss scale of a network trained in fp16 (halved on a step whose
        gradients overflow, that step's update skipped); None where the network has none.
        Read outside timed regions: it may wait for the device."""
        return None

    def labels_from_numpy(self, y: np.ndarray) -> Tensor:
        """Integer class labels (or token ids) as a device tensor."""
        raise _not_implemented(self, "network", "labels_from_numpy")

    def reset_peak_memory(self) -> None:
        return None

    def peak_memory_bytes(self) -> int | None:
        """Peak device memory since ``reset_peak_memory`` (None when not measurable)."""
        return None


class Coordination:
    """How the ranks of a strategy's runtime share the training. The default: every rank's
    process trains its own shard and writes its own record. A runtime in which one process
    coordinates (dispatches every rank's steps) while the other ranks only host the runtime
    overrides it: the coordinator feeds every rank's shard itself, and the serving ranks'
    records are the coordinator's measurement, published to them."""

    def coordinates(self) -> bool:
        """Whether this rank's process drives the training."""
        return True

    def feeds_all_ranks(self) -> bool:
        """Whether this process feeds every rank's shard itself: ``train_step`` then gets the
        whole global batch."""
        return False

    def publish(self, fields: dict[str, Any]) -> None:
        """On the coordinator: its record fields, for the ranks that only serve."""
        return None

    def serve(self) -> dict[str, Any]:
        """On a rank that does not coordinate: host the runtime until the coordinator is
        done; return the coordinator's record fields."""
        raise NotImplementedError("every rank of this runtime coordinates its own training")


class DistributedWords:
    """The distributed vocabulary (mixed into Adapter): the framework's own runtime, never a
    home-made one. Ranks find each other through RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
    (and LOCAL_RANK), which the worker exports from whichever launcher started it."""

    def dist_init(self, backend: str) -> str:
        """Join the process group; ``backend`` "auto" picks the framework's best for the
        device (NCCL on GPUs, gloo on CPUs). Returns the backend in use.

        This is where a runtime that reads its own environment variables gets them: translate
        the suite's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT into the framework's names here,
        before the runtime starts (MXNet: DMLC_PS_ROOT_URI, DMLC_NUM_WORKER, ...; TensorFlow:
        TF_CONFIG), and never in a launcher, so every launcher works unchanged."""
        raise _not_implemented(self, "distributed", "dist_init")

    def dist_shutdown(self, clean: bool = True) -> None:
        """Leave the process group; ``clean`` (no rank failed) allows a closing barrier."""
        raise _not_implemented(self, "distributed", "dist_shutdown")

    def barrier(self) -> None:
        """Return once every rank has called it. By default a collective every rank must enter
        before any leaves it (``agree_max(0)``), for a runtime without a barrier of its own
        (TensorFlow's collectives, horovod.tensorflow); a framework that has one overrides."""
        self.agree_max(0)

    def agree_max(self, value: int) -> int:
        """Max of an integer across ranks (keeps sampling loops in lock-step)."""
        raise _not_implemented(self, "distributed", "agree_max")

    def allreduce(self, t: Tensor) -> Tensor:
        """In-place sum across ranks."""
        raise _not_implemented(self, "distributed", "allreduce")

    def allgather(self, t: Tensor) -> Tensor:
        """Rank-ordered concatenation (along axis 0) of every rank's ``t``."""
        raise _not_implemented(self, "distributed", "allgather")

    def broadcast(self, t: Tensor, root: int = 0) -> Tensor:
        raise _not_implemented(self, "distributed", "broadcast")

    def reduce_scatter(self, t: Tensor) -> Tensor:
        """Sum across ranks of ``t`` (length world*k), this rank's k-element chunk."""
        raise _not_implemented(self, "distributed", "reduce_scatter")

    def data_parallel(self, net: Any) -> Any:
        """Wrap a built network so train_step averages gradients across ranks."""
        raise _not_implemented(self, "distributed", "data_parallel")

    #: how :meth:`data_parallel_bucketed` sets the size of the messages the gradients travel
    #: in (one line, recorded with the result); empty: the mechanism has no such size
    data_parallel_buckets: ClassVar[str] = ""

    def data_parallel_bucketed(self, net: Any, bucket_bytes: int) -> Any:
        """:meth:`data_parallel` with the gradients exchanged in messages of ``bucket_bytes``
        (the data_parallel benchmark's ``bucket``); only where ``data_parallel_buckets`` says
        how."""
        raise NotImplementedError

    def bucket_at_init(self, bucket_bytes: int | None) -> None:
        """The data_parallel task's ``bucket`` (None: it sets none), given before
        :meth:`dist_init`, for a runtime that reads its bucket size once, as it starts
        (Horovod's HOROVOD_FUSION_THRESHOLD). By default nothing: the bucket is set where
        the network is wrapped (:meth:`data_parallel_bucketed`)."""

    def data_parallel_settings(self) -> dict[str, Any]:
        """The exchange's settings in effect, for the data_parallel record's work (Horovod's
        fusion threshold and cycle time, and where each came from); by default none."""
        return {}

    def train_step_no_sync(self, net: Any, x: Tensor, y: Tensor) -> Tensor:
        """A data-parallel train step without the gradient exchange (for the comm share)."""
        raise _not_implemented(self, "distributed", "train_step_no_sync")

    # -- strategies (suite/strategies.py) ---------------------------------
    #: the strategies this adapter maps to its framework's own mechanism: name -> that
    #: mechanism in one line (recorded with every result, listed in docs/reference/strategies.md)
    strategies: ClassVar[dict[str, str]] = {}
    #: the strategies it cannot run: name -> why (the task is skipped with this reason). The
    #: conformance kit requires every strategy of the suite in one of the two.
    unsupported_strategies: ClassVar[dict[str, str]] = {}

    @classmethod
    def strategy_declined(cls, strategy: str) -> str:
        """Why ``strategy`` is not run here ("" when the adapter maps it). Host side: reads
        only the class's declarations."""
        if "distributed" not in getattr(cls, "words", frozenset()):
            return f"{getattr(cls, 'name', '?')} does not implement the distributed words" + (
                missing_because(cls, ["distributed"])
            )
        if strategy in cls.strategies:
            return ""
        return cls.unsupported_strategies.get(strategy) or (
            f"{getattr(cls, 'name', '?')} declares no mapping of the strategy {strategy!r}"
        )

    def strategy_init(
        self, strategy: str, options: Mapping[str, Any], backend: str, rendezvous: str = ""
    ) -> str:
        """Join the runtime ``strategy`` needs (a parameter-server kvstore, a coordinator's
        cluster, ...). The default joins the process group (``dist_init``). ``rendezvous`` is
        a path prefix every rank of the task sees (next to its records) for runtimes whose
        ranks must exchange addresses before they can talk. Returns a description of the
        runtime in use."""
        return self.dist_init(backend)

    def strategy_shutdown(self, clean: bool = True) -> None:
        """Leave what ``strategy_init`` joined (default: ``dist_shutdown``)."""
        self.dist_shutdown(clean)

    def apply_strategy(
        self, net: Any, strategy: str, options: Mapping[str, Any], world: int
    ) -> Any:
        """Make ``train_step`` on ``net`` (built by ``build_network``) train with
        ``strategy``, through the framework's own mechanism; returns the network to train.
        A pipeline's ``net`` is this rank's stage (``options`` hold ``stage`` and ``stages``);
        its ``train_step`` gets the whole global batch on every rank and returns the loss on
        the last stage, None on the others. The default maps ``allreduce`` to the adapter's
        data-parallel word."""
        if strategy == "allreduce":
            return self.data_parallel(net)
        raise NotImplementedError(f"{getattr(self, 'name', '?')} has no mapping of {strategy!r}")

    def strategy_parameters(self, net: Any) -> dict[str, np.ndarray]:
        """The whole model's current weights as this rank holds them (a pipeline's stages
        gathered from every rank: a collective). Default: ``network_parameters``."""
        params: dict[str, np.ndarray] = self.network_parameters(net)  # type: ignore[attr-defined]
        return params

    def strategy_bytes(
        self,
        strategy: str,
        options: Mapping[str, Any],
        shapes: list[tuple[int, ...]],
        world: int,
        *,
        cut_elements: int = 0,
        stage: int = 0,
    ) -> dict[str, Any]:
        """What one rank sends per step under ``strategy`` (``bytes``, ``uncompressed``,
        ``model``: how it was counted): the definition (:func:`suite.strategies.sent_bytes_per_step`)
        of the strategy itself, or of the one :attr:`strategy_sent_as` names for it."""
        sent_as = self.strategy_sent_as.get(strategy, strategy)
        out = S.sent_bytes_per_step(
            S.get(sent_as), options, shapes, world, cut_elements=cut_elements, stage=stage
        )
        if sent_as != strategy:
            out["model"] = f"{strategy} sent as {sent_as}: {out['model']}"
        return out

    #: strategy -> the strategy whose definition the framework's mechanism sends as, where it
    #: differs from the strategy's own (MXNet's allreduce is a push to a kvstore server and a
    #: pull: ps-sync's bytes, not a ring's)
    strategy_sent_as: ClassVar[dict[str, str]] = {}

    def strategy_words_usable(self, strategy: str) -> bool:
        """Whether ``agree_max`` and ``allgather`` still give their results while
        ``strategy`` runs (``barrier`` must, always). False where the strategy's mechanism
        alters every exchange (MXNet's kvstore compression quantises the control words'
        pushes too): the suite then measures a fixed number of steps on every rank instead
        of deciding jointly, and does not compare the ranks' weights."""
        return True

    #: why /proc/self/io's write counter cannot see this framework's communication ("" when
    #: it can: gloo writes with write(2)/writev(2), which the kernel counts)
    write_counter_blind: ClassVar[str] = ""

    def strategy_coordination(self) -> Coordination:
        """How this rank takes part in the strategy's training, after ``strategy_init``: by
        default every rank trains its own shard (:class:`Coordination`). A runtime where one
        rank's process coordinates the others (TensorFlow's ParameterServerStrategy) returns
        its own."""
        return Coordination()


class Adapter(NetworkWords, DistributedWords, OptimizerWords, DataWords, ABC):
    """One per framework. Subclasses set the class attributes and implement the words.

    Lifecycle in the worker: ``available()`` (no import) → ``Adapter()`` → ``setup(device)``
    (imports the framework) → ``supports(dtype)`` and ``supports_word(word, dtype)`` for the
    words the benchmark needs → tensors, ops, ``time`` → records.
    """

    #: registry name (``--framework``), also the ``framework.name`` in records
    name: ClassVar[str]
    #: the import name of the framework, checked with ``find_spec`` (never imported to check)
    module: ClassVar[str]
    #: the distribution whose version is recorded
    distribution: ClassVar[str]
    #: adapter version (bump when the mapping of a word changes what is measured)
    adapter_version: ClassVar[str] = "1"
    #: operator words this adapter implements; benchmarks needing others are skipped, not failed
    words: ClassVar[frozenset[str]] = frozenset()
    #: the launcher ``--launcher auto`` picks for several ranks (the suite's own by default)
    default_launcher: ClassVar[str] = "spawn"
    #: the ``--dist-backend`` values besides ``auto`` that ``dist_init`` takes (on some
    #: device: the runtime still refuses NCCL on a CPU); a run that names another is refused
    #: at planning (exit 2) instead of every distributed task skipping or failing in its
    #: ranks. None: not declared, every value is left to ``dist_init``
    dist_backends: ClassVar[frozenset[str] | None] = None
    #: why this adapter's distributed runtime cannot span several nodes ("" when it can); a
    #: distributed run with ``--nodes`` above 1 is then refused at planning (exit 2)
    single_node: ClassVar[str] = ""
    #: collectives the adapter can only emulate (the word works, e.g. for checks, but its time
    #: would not be that collective's): name -> why; the collective benchmark is skipped with it
    emulated_collectives: ClassVar[dict[str, str]] = {}
    #: collectives the adapter has no word for at all (the word raises ``UnsupportedError``):
    #: name -> why; the collective benchmark is skipped with it, on the host
    unsupported_collectives: ClassVar[dict[str, str]] = {}
    #: words this adapter leaves out of ``words`` on purpose: word (an operator word, ``vjp``,
    #: or a vocabulary: ``network``, ``distributed``, ``optimizer``, ``data``) -> why, in one
    #: line. A task that needs the word is skipped, and its record says "<name> does not
    #: implement ...: <why>" instead of only that it is missing (MindSpore's ``vjp`` would
    #: recompute the forward on every call, so it cannot honour the word's contract). Read from
    #: the class, on the host as in the worker; the conformance kit checks that a word here is
    #: not in ``words``.
    missing_words: ClassVar[dict[str, str]] = {}
    #: benchmarks whose values this framework is known to get wrong, now and then, through a
    #: bug of its own (an upstream issue): name -> the bug, with where it applies and its
    #: reference. The benchmark still runs and a wrong value still fails its check; the check
    #: then names the bug (its ``detail.known_bug``), so a reader sees a known framework bug,
    #: not a suite bug. ``known_bug`` says whether it applies on this process's device.
    known_bugs: ClassVar[dict[str, str]] = {}
    #: the levels this adapter measures; tasks of other levels are skipped with ``levels_reason``
    #: (Horovod: a distributed strategy, whose operators and networks are its base framework's)
    levels: ClassVar[frozenset[str]] = frozenset({"operator", "network", "distributed", "training"})
    levels_reason: ClassVar[str] = ""
    #: whether ``--xla`` means something (operators compiled with XLA); others skip such tasks
    #: with ``xla_reason`` (or a line saying the framework has no XLA compilation of operators)
    xla_capable: ClassVar[bool] = False
    xla_reason: ClassVar[str] = ""
    #: whether one process can run several distributed tasks in a row, keeping its process
    #: group (``dist_init`` finds it set up; suite/session.py). False: each task of several
    #: ranks gets a process of its own (runtimes that cannot be set up twice in a process)
    keeps_process_group: ClassVar[bool] = False

    #: compile the operators with XLA (``--xla``): set by the worker before ``setup``, only on
    #: an ``xla_capable`` adapter
    xla: bool = False

    @classmethod
    def xla_declined(cls) -> str:
        """Why a ``--xla`` task is skipped here, one line ("" where ``--xla`` applies)."""
        if cls.xla_capable:
            return ""
        return cls.xla_reason or (
            f"{cls.name} has no XLA compilation of operators; run it without --xla"
        )

    # -- availability (host side: must not import the framework) ---------------------------
    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether the framework is importable here, without importing it."""
        if importlib.util.find_spec(cls.module) is None:
            return False, f"{cls.module} is not installed in this environment"
        return True, ""

    @classmethod
    def installed_version(cls) -> str | None:
        try:
            return metadata.version(cls.distribution)
        except metadata.PackageNotFoundError:
            return None

    @classmethod
    def version_unknown(cls) -> str:
        """Why ``installed_version()`` is None, in words (``dlsuite list``, the kit): the
        ``distribution`` is not installed here under that name."""
        return (
            f"unknown (distribution {cls.distribution!r} not installed; set the adapter's "
            f"distribution to the name pip installs {cls.module!r} by, or override "
            f"installed_version)"
        )

    @classmethod
    def missing_because(cls, words: Iterable[str]) -> str:
        """The end of the sentence that says ``words`` are missing: ": <why>" where
        ``missing_words`` gives the one word's reason, ": vjp: <why>; gelu: <why>" for several,
        "" where it gives none (the sentence then ends as it always did)."""
        return missing_because(cls, words)

    @classmethod
    def words_problem(cls) -> str:
        """What is wrong with ``words`` ("" when nothing): an entry that is no word of the
        suite (a misspelling would only make its benchmarks skip), or a declared word whose
        methods the class does not override (its tasks would fail with the base class's
        NotImplementedError); or with ``unsupported_word_dtypes``: a word not in ``words``, a
        dtype that is no task dtype (fp64) or is fp32, an empty reason. Reads the class only:
        the planner calls it on the host, and the conformance kit."""
        for word in sorted(cls.words):
            if word not in WORD_METHODS:
                known = ", ".join(sorted(WORD_METHODS))
                return (
                    f"{cls.name} declares unknown word {word!r} in words (known: {known}); "
                    f"correct it in the adapter class"
                )
            for method in WORD_METHODS[word]:
                if getattr(cls, method) is getattr(Adapter, method):
                    return (
                        f"{cls.name} declares {word!r} but does not override Adapter.{method}; "
                        f"implement it, or take {word!r} out of words"
                    )
        for word, refused in sorted(cls.unsupported_word_dtypes.items()):
            entry = f"{cls.name}: unsupported_word_dtypes[{word!r}]"
            if word not in cls.words:
                return f"{entry} names a word not in words; remove the entry"
            for dtype, why in sorted(refused.items()):
                if dtype == "fp32":
                    return (
                        f"{entry} refuses fp32, the baseline every declared word runs; take "
                        f"{word!r} out of words instead"
                    )
                if dtype not in DTYPES:
                    return (
                        f"{entry} names {dtype!r}, which is not a task dtype (those are "
                        f"{', '.join(DTYPES)}; fp64 is the references' internal precision, "
                        f"never a task's); remove it"
                    )
                if not why.strip():
                    return f"{entry}[{dtype!r}] needs a reason, in one line"
        return ""

    # -- device ------------------------------------------------------------------------------
    @abstractmethod
    def setup(self, device: str) -> DeviceInfo:
        """Import the framework, select ``device`` ("cpu", "cuda" or "auto"), describe it."""

    def versions(self) -> dict[str, str | None]:
        """Framework, accelerator runtime and library versions for provenance. The default
        is the framework's distribution version from package metadata; override to add the
        accelerator runtime and libraries (CUDA, cuDNN, oneDNN, ...)."""
        return {self.distribution: self.installed_version()}

    def supports(self, dtype: str) -> tuple[bool, str]:
        """Whether ``dtype`` can run on the selected device; the reason when not."""
        return True, ""

    #: dtypes that some words cannot run although ``supports`` accepts them on the device:
    #: word -> {dtype: why} (a framework whose CPU build has fp16 kernels for some operators
    #: but not others). A task whose benchmark needs such a word at such a dtype is skipped
    #: with the reason. Declared on the class (read without importing the framework); fp32,
    #: the baseline, cannot be refused here: leave the word out of ``words`` instead.
    unsupported_word_dtypes: ClassVar[dict[str, dict[str, str]]] = {}

    def supports_word(self, word: str, dtype: str) -> tuple[bool, str]:
        """Whether ``word`` runs at ``dtype`` on the selected device, given that ``supports``
        accepts the dtype; the reason when not. The default reads
        ``unsupported_word_dtypes``; override it where the answer depends on the device."""
        why = self.unsupported_word_dtypes.get(word, {}).get(dtype, "")
        return (False, why) if why else (True, "")

    def known_bug(self, benchmark: str) -> str | None:
        """The bug of ``known_bugs`` that applies to ``benchmark`` on the selected device
        (None: a wrong value would be news). The default applies each on every device;
        override it where a bug is one device's."""
        return self.known_bugs.get(benchmark)

    def end_task(self) -> dict[str, list[str]]:
        """After a task, when the same process runs another (a worker session): free what the
        task left in the framework that a fresh process would not have (cached device memory,
        compiled graphs, global graph state), so the next task measures as it would alone.
        Returns what was freed (``reset``) and what deliberately stays warm (``warm``): both
        go into the next record's ``worker`` section. The default frees nothing."""
        return {"reset": [], "warm": []}

    def memory_bandwidth(self) -> Any:
        """The selected device's memory bandwidth measured through the framework (a
        :class:`suite.membw.Bandwidth`: a STREAM triad as one kernel), for accelerators the
        host-side NumPy triad cannot reach; None where the device is the host's CPU (the worker
        measures that once per host: suite/membw.py)."""
        return None

    def synchronize(self) -> None:
        """Block until all queued device work is done (no-op for synchronous CPU code)."""
        return None

    def realize(self, outputs: Any) -> None:
        """Make the work that produces ``outputs`` happen. :meth:`time` calls this with
        **each** call's outputs (what a timed call returned: a tensor, a dict or list of
        them, or None), right after the call. The default does nothing: eager and
        asynchronous frameworks do the work anyway, and :meth:`time` does not call it at all
        unless an adapter overrides it. A lazy framework, whose work runs only when a result is
        asked for, overrides it (e.g. tinygrad's ``Tensor.realize``), as a user's training loop
        forces every step; without it every call but the last would be timed doing nothing."""
        return None

    def wait(self, outputs: Any) -> None:
        """Block until the work that produced ``outputs`` — the last timed call's — is done,
        before :meth:`time` reads the clock. The default synchronises the device. An
        asynchronous framework whose results are futures overrides this to wait on them
        (JAX: ``block_until_ready``; TensorFlow: materialise the tensors)."""
        self.synchronize()

    def time(self, fn: Callable[[], Any], n: int) -> float:
        """Seconds for ``n`` (>= 1) calls of ``fn``: the device is synchronised before the
        first clock read; each call's outputs go to :meth:`realize` where the adapter overrides
        it; the last call's are waited for (:meth:`wait`) and the device synchronised before
        the second read. Adapters with a native device timer override this (PyTorch uses CUDA
        events on a GPU). The run checks every record's timer against materialised calls
        (:func:`suite.measure.timer_check`)."""
        if n < 1:
            raise ValueError(f"Adapter.time: n must be at least 1, got {n}")
        # The calls run back to back, each one's outputs dropped as it returns, as in a bare
        # loop: kept alive, they pin a second output buffer the allocator could have reused;
        # and any Python between two calls, even the no-op realize's method call, read 0.2-0.4%
        # slower for a 0.6 ms conv2d backward on the CPU (docs/studies/overhead-cpu.md).
        realize = None if type(self).realize is Adapter.realize else self.realize
        self.synchronize()
        t0 = time.perf_counter()
        if realize is None:
            for _ in range(n - 1):
                fn()
        else:
            for _ in range(n - 1):
                realize(fn())
        out = fn()
        if realize is not None:
            realize(out)
        self.wait(out)
        self.synchronize()
        return time.perf_counter() - t0

    # -- tensors -----------------------------------------------------------------------------
    @abstractmethod
    def from_numpy(self, x: np.ndarray, dtype: str, *, requires_grad: bool = False) -> Tensor:
        """A device tensor of ``dtype`` holding ``x`` (already quantised to ``dtype``)."""

    @abstractmethod
    def to_numpy(self, t: Tensor) -> np.ndarray:
        """The tensor's values as a float64 host array (synchronises as needed)."""

    def copy_from_numpy(self, t: Tensor, x: np.ndarray) -> None:
        """Overwrite ``t`` in place with ``x`` (same shape; cast to ``t``'s dtype)."""
        raise _not_implemented(self, "distributed", "copy_from_numpy")

    # -- autodiff ----------------------------------------------------------------------------
    def vjp(
        self, fn: Callable[..., Tensor], primals: Mapping[str, Tensor], cotangent: Tensor
    ) -> Callable[[], Sequence[Tensor]]:
        """Run ``fn(**primals)`` once and return a callable computing only the backward pass:
        the vector-Jacobian product of ``cotangent`` with respect to every primal, in the
        order of ``primals`` (as ``torch.autograd.grad``, ``jax.vjp``'s pullback and
        ``GradientTape.gradient`` return them: the timed callable adds no container of its
        own, docs/studies/overhead-cpu.md)."""
        raise NotImplementedError(
            f"{self.name} does not implement the word 'vjp'" + self.missing_because(["vjp"])
        )

    # -- operator words ----------------------------------------------------------------------
    # Each raises NotImplementedError, naming the adapter and the word, unless the adapter
    # overrides it (and lists it in ``words``).
    def matmul(self, a: Tensor, b: Tensor) -> Tensor:
        """Matrix product ``a @ b``, batched over leading axes: (m, k) @ (k, n), or
        (batch, m, k) @ (batch, k, n) as the ``gemm`` benchmark's ``batch`` passes them (one
        product per batch entry, as attention's q k^T and p v are), as ``np.matmul``."""
        raise _not_implemented(self, "matmul")

    def conv2d(
        self, x: Tensor, w: Tensor, *, stride: int, padding: int, dilation: int = 1, groups: int = 1
    ) -> Tensor:
        """NCHW input, OIHW weight (I = C / ``groups``), no bias, the same ``stride``,
        zero ``padding`` and ``dilation`` (distance between kernel taps) on both axes. The
        benchmark passes ``dilation`` and ``groups`` only where they are not 1, so an adapter
        that maps only plain convolutions may leave them out of its signature; one that cannot
        run a value raises ``UnsupportedError`` (a skipped record)."""
        raise _not_implemented(self, "conv2d")

    def batch_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float) -> Tensor:
        """Training-mode batch norm over N, H, W of an NCHW tensor (batch statistics)."""
        raise _not_implemented(self, "batch_norm")

    def layer_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float) -> Tensor:
        """Layer norm over the last axis."""
        raise _not_implemented(self, "layer_norm")

    def softmax(self, x: Tensor) -> Tensor:
        """Softmax over the last axis."""
        raise _not_implemented(self, "softmax")

    def gelu(self, x: Tensor) -> Tensor:
        """Exact (erf) GELU."""
        raise _not_implemented(self, "gelu")

    def attention(self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool) -> Tensor:
        """Scaled dot-product attention on (batch, heads, seq, head_dim), scale 1/sqrt(d)."""
        raise _not_implemented(self, "attention")


def host_cpu_info() -> DeviceInfo:
    """A DeviceInfo for this host's CPU with an estimated peak (the source says how)."""
    from suite.telemetry.host import CpuWindow
    from suite.telemetry.quiet import Thresholds

    watch = (lambda: CpuWindow({os.getpid()}), Thresholds().cpu_limit(cpuinfo.usable_cores()))
    est = cpuinfo.peak(watch)
    extra: dict[str, Any] = {}
    if cpuinfo.injected():  # the record says its CPU facts were not this machine's
        extra["cpu_facts_from"] = cpuinfo.cpuinfo_source()
    return DeviceInfo(
        kind="cpu",
        name=cpuinfo.model_name(),
        count=1,
        peak_tflops=est.tflops,
        peak_source=est.source,
        extra={
            "cores": cpuinfo.usable_cores(),
            "machine": platform.machine(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            **extra,
        },
    )
