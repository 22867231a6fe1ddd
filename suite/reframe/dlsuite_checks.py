"""dlsuite as a ReFrame test library: ``reframe -C CONFIG -c suite/reframe -r``.

CONFIG comes from the site profile: ``dlsuite reframe config --site SITE --out CONFIG``. Each
test runs ``dlsuite run`` (quick sizes by default) for one level, benchmark, framework, dtype
and world size as its executable, through ReFrame's scheduler on every partition of the
system that has the ``dlsuite`` feature:

* the suite's own Slurm submission is off (``--scheduler none``): ReFrame's job is the
  allocation, a second job submitted from inside it would escape ReFrame's time limits,
  accounting and cancellation. ReFrame's launcher is ``local``; the ranks of a distributed test
  start with the site's launcher inside ReFrame's allocation (srun on a Slurm site), because
  ``dlsuite run`` is one process that plans, starts the ranks and collects their records.
* sanity comes from the records: every record ok, every correctness check passed, every record
  valid against schemas/result.schema.json, and run on the device the site profile declares.
* one performance variable per figure: every metric of every record (time, flop_rate,
  bandwidth, busbw, throughput...), with the record's unit, named ``bench[params].metric``.
* references per ``system:partition`` come from the suite's references/ when the tests load
  (the partition's declared device picks them, suite/reframe/checks.py), never from a copy.

Select with ReFrame's own filters (``-n DlsuiteOperator``, ``-t pytorch``, ``-E "benchmark ==
'gemm'"``) and set with ``-S``: ``dlsuite_config`` (a dlsuite TOML, e.g. its [measure]
settings), ``dlsuite_quick`` (false: the full sizes), ``dlsuite_references`` (references files
or directories, ``:``-separated), ``dlsuite_timeout``, ``dlsuite_python``, ``dlsuite_nodes``,
``dlsuite_args`` (further ``dlsuite run`` flags), ``dlsuite_include_busy`` (judge figures
measured on a busy machine against their references; by default they are logged, not judged).
The frameworks, dtypes and world sizes
tested come from DLSUITE_REFRAME_FRAMEWORKS, _DTYPES and _WORLD_SIZES (comma-separated;
defaults: the frameworks available here, fp32, 2). docs/guide/integrations.md has the whole story.
"""

from __future__ import annotations

import os
import shlex
import sys
from functools import lru_cache
from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
import reframe.utility.typecheck as typ
from reframe.core.builtins import parameter, run_after, run_before, sanity_function, variable
from reframe.core.exceptions import SanityError

#: the checkout this library ships in: its suite, references/ and sites/
ROOT = Path(__file__).resolve().parents[2]

try:
    import suite  # noqa: F401 - installed (pip install -e .) in ReFrame's interpreter
except ImportError:
    # ReFrame loads this file by path (``-c suite/reframe``), not as suite.reframe's module:
    # where the suite is not installed, the checkout this file is part of is put on the path
    sys.path.insert(0, str(ROOT))
    try:
        import suite  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"dlsuite's host side does not import in ReFrame's interpreter ({exc}); install "
            f"ReFrame into dlsuite's environment: pip install -e '{ROOT}[dev]'"
        ) from None

from suite.references import Reference, load_references  # noqa: E402
from suite.reframe import checks as rc  # noqa: E402 - after the path is set


@lru_cache(maxsize=8)
def _references(paths: str) -> tuple[Reference, ...]:
    return tuple(load_references([Path(p) for p in paths.split(os.pathsep) if p]))


@lru_cache(maxsize=32)
def _site_partition(site: str, partition: str, rfm_partition: str) -> rc.SitePartition:
    extras = {rc.EXTRA_SITE: site, rc.EXTRA_PARTITION: partition}
    return rc.site_partition(extras, rfm_partition)


def site_partition_of(part: object) -> rc.SitePartition:
    extras = getattr(part, "extras", {})
    return _site_partition(
        str(extras.get(rc.EXTRA_SITE, "")),
        str(extras.get(rc.EXTRA_PARTITION, "")),
        str(getattr(part, "fullname", "?")),
    )


@sn.deferrable
def assert_records(path: str, declared: dict | None, where: str) -> bool:
    """Sanity: every record ok, correct, schema-valid, on the declared device."""
    problems = rc.sanity_problems(rc.read_results(Path(path)), declared_device=declared,
                                  where=where)  # fmt: skip
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise SanityError(f"{path}: " + "; ".join(problems[:5]) + more)
    return True


def figure_value(path: str, name: str) -> float:
    """A performance variable's value, read from the records when ReFrame evaluates it."""
    return rc.figures(rc.read_results(Path(path)))[name].value


class DlsuiteBase(rfm.RunOnlyRegressionTest):
    """One ``dlsuite run`` of one benchmark, framework, dtype (and world size)."""

    level = "operator"

    dlsuite_references = variable(str, value=str(ROOT / "references"))
    dlsuite_config = variable(str, value="")
    dlsuite_quick = variable(typ.Bool, value=True)
    dlsuite_timeout = variable(float, type(None), value=None)
    dlsuite_python = variable(str, value="")
    dlsuite_nodes = variable(int, value=1)
    dlsuite_args = variable(typ.List[str], value=[])
    dlsuite_include_busy = variable(typ.Bool, value=False)

    valid_systems = [f"+{rc.FEATURE}"]
    valid_prog_environs = [f"+{rc.FEATURE}"]
    exclusive_access = True  # benchmarks want their nodes to themselves
    keep_files = ["run"]  # the run directory (records, tasks, logs) goes to the output dir
    maintainers = ["dlsuite"]

    @property
    def ranks(self) -> int:
        return int(getattr(self, "world_size", 1))

    @property
    def results_path(self) -> str:
        return os.path.join(self.stagedir, "run", "results.jsonl")

    @run_after("init")
    def load_references(self) -> None:
        """The suite's references of this test on every dlsuite partition of the system,
        read from references/ now, when the test loads."""
        self.descr = f"dlsuite {self.level} {self.benchmark} ({self.framework}, {self.dtype}" + (
            f", {self.ranks} ranks)" if self.level == "distributed" else ")"
        )
        self.tags |= {"dlsuite", self.level, self.framework, self.dtype}
        self.tags.add("quick" if self.dlsuite_quick else "full")
        # -S dlsuite_config=tests/fast-measure.toml is relative to where reframe started; the
        # job runs in its stage directory, where that path names nothing
        if self.dlsuite_config:
            self.dlsuite_config = os.path.abspath(os.path.expanduser(self.dlsuite_config))
        why = rc.unsupported(self.level, self.benchmark, self.framework)
        self.skip_if(why is not None, f"unsupported: {why}")
        refs = _references(self.dlsuite_references)
        self.dlsuite_partition_refs: dict[str, list[Reference]] = {}
        for part in self.current_system.partitions:
            if rc.EXTRA_SITE not in part.extras:
                continue
            sp = site_partition_of(part)
            self.dlsuite_partition_refs[part.fullname] = rc.partition_references(
                refs, rc.partition_device(sp.partition), level=self.level,
                benchmark=self.benchmark, framework=self.framework, dtype=self.dtype,
            )  # fmt: skip

    @run_after("setup")
    def set_command(self) -> None:
        sp = site_partition_of(self.current_partition)
        nodes = self.dlsuite_nodes if self.level == "distributed" else 1
        if self.ranks % nodes:
            raise ValueError(f"dlsuite_nodes={nodes} does not divide world size {self.ranks}")
        self.num_tasks = self.ranks
        self.num_tasks_per_node = self.ranks // nodes
        per_node = self.num_tasks_per_node
        # as the suite's own Slurm jobs split a node's cores; one rank per node takes them all
        # (it asked for none there: Slurm's one CPU per task, a 1-rank GEMM bound to one core)
        cpus = sp.partition.cpus_per_task(per_node)
        if cpus:
            self.num_cpus_per_task = cpus
            self.env_vars["SRUN_CPUS_PER_TASK"] = str(cpus)
        if sp.partition.gpus_per_node and sp.partition.gpu_gres:
            self.extra_resources: dict[str, dict[str, str]] = {"gpu": {}}
        python = self.dlsuite_python or sp.site.python or sys.executable
        argv = rc.dlsuite_command(
            python=python, site=sp.site.path, level=self.level, benchmark=self.benchmark,
            framework=self.framework, dtype=self.dtype, out=os.path.join(self.stagedir, "run"),
            world_size=self.ranks, nodes=nodes, quick=self.dlsuite_quick,
            config=self.dlsuite_config or None, timeout=self.dlsuite_timeout,
            extra=self.dlsuite_args,
        )  # fmt: skip
        # ReFrame joins these into a shell line: every argument is quoted
        self.executable = shlex.quote(argv[0])
        self.executable_opts = [shlex.quote(a) for a in argv[1:]]
        self.env_vars["PYTHONPATH"] = shlex.quote(str(ROOT)) + "${PYTHONPATH:+:$PYTHONPATH}"

    @sanity_function
    def records_pass(self) -> object:
        sp = site_partition_of(self.current_partition)
        return assert_records(self.results_path, sp.partition.device, sp.label)

    @run_before("performance")
    def set_figures(self) -> None:
        """One performance variable per figure of the records, and the partition's references
        bound to the figures they match."""
        records = rc.read_results(Path(self.results_path))
        self.perf_variables = {
            name: sn.make_performance_function(figure_value, fig.unit, self.results_path, name)
            for name, fig in rc.figures(records).items()
        }
        part = self.current_partition.fullname
        refs = self.dlsuite_partition_refs.get(part, [])
        self.reference = {part: rc.reframe_reference(records, refs, self.dlsuite_include_busy)}
        note = rc.busy_note(records, self.dlsuite_include_busy)
        if note:
            from reframe.core.logging import getlogger

            getlogger().warning(f"{self.display_name}: {note}")


@rfm.simple_test
class DlsuiteOperator(DlsuiteBase):
    level = "operator"
    benchmark = parameter(rc.benchmarks("operator"))
    framework = parameter(rc.frameworks(level="operator"))
    dtype = parameter(rc.dtypes())


@rfm.simple_test
class DlsuiteNetwork(DlsuiteBase):
    level = "network"
    benchmark = parameter(rc.benchmarks("network"))
    framework = parameter(rc.frameworks(level="network"))
    dtype = parameter(rc.dtypes())


@rfm.simple_test
class DlsuiteDistributed(DlsuiteBase):
    level = "distributed"
    benchmark = parameter(rc.benchmarks("distributed"))
    framework = parameter(rc.frameworks(level="distributed"))
    dtype = parameter(rc.dtypes())
    world_size = parameter(rc.world_sizes())
