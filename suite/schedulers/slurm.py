"""Slurm: the plan becomes a job array; each element runs the suite itself in the allocation.

Host side (login node)::

    RUN_DIR/slurm/s<N>/plan.json       the tasks of every array element, and the run settings
    RUN_DIR/slurm/s<N>/job.sbatch      the rendered batch script (``--dry-run`` prints it)
    RUN_DIR/slurm/s<N>/slurm-%A_%a.out each element's stdout and stderr
    RUN_DIR/slurm/s<N>/part-<i>/       element i's own run directory (results, tasks, logs)
    RUN_DIR/slurm/jobs.json            every submission: job id, elements, state
    RUN_DIR/slurm/host.jsonl           what each invocation cost the host, per phase (hostclock)
    RUN_DIR/superseded.jsonl           incomplete records (failed, placeholders of ended jobs)
                                       that a --resume replaced by running the task again

The batch script loads the site's modules, exports its variables and execs
``python -m suite.schedulers.job plan.json``, which runs its element's tasks through the
ordinary runner (scheduler ``none``; ranks start with the site's launcher, ``srun`` by default,
inside the chosen backend) into ``part-<i>/``. Each element writes its own part, so concurrent
elements never share a file; the host merges every new record into ``RUN_DIR/results.jsonl``
while it polls ``squeue`` (one call per poll for all its arrays; ``scontrol show job`` for the
final states: there may be no slurmdbd, so ``sacct`` is not used). A poll's cost does not grow
with the records merged: each part is read on from where the last poll stopped, each record
parsed and validated once. An array holds at most MaxArraySize elements (more tasks are
packed into each where needed). A task whose element ended without a record for it gets a
failed record naming the job and its state; ``--resume`` replaces those by running the tasks
again, re-attaches to jobs still in the queue, and never repeats a task that has a record.

Nothing a user typed reaches a shell unquoted: every value is checked against a whitelist
(newlines are always refused) and rendered with :func:`shlex.quote`; Slurm's commands are run
as argument lists.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.errors import ConfigError, SchedulerError, SuiteError
from suite.rundir import Manifest, RunOutcome, appended_lines, open_run_dir, write_json_atomic
from suite.safety import check_text
from suite.schedulers.base import Scheduler
from suite.schedulers.hostclock import HostClock
from suite.sites import Partition, Site, format_time, parse_time

if TYPE_CHECKING:
    from suite.plan import Task
    from suite.settings import RunConfig

#: names Slurm takes for jobs, partitions, accounts, QoS, reservations
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
GRES_RE = re.compile(r"^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)*(,[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)*)*$")
MODULE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+@/-]*$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
OPTION_RE = re.compile(r"^--[a-z][a-z0-9-]*(=[A-Za-z0-9_.:,@/+=&|\[\]*-]+)?$")
TIME_RE = re.compile(r"^(\d+-\d{1,2}(:\d{2}(:\d{2})?)?|\d+(:\d{2}(:\d{2})?)?)$")
#: options the suite sets itself; a site's sbatch_options may not override them
OWN_OPTIONS = (
    "--job-name", "--partition", "--account", "--qos", "--reservation", "--time", "--nodes",
    "--ntasks", "--ntasks-per-node", "--cpus-per-task", "--gres", "--output", "--error",
    "--array", "--chdir", "--mem", "--constraint", "--parsable", "--wait", "--wrap",
)  # fmt: skip
SLACK_S = 600.0  # per element, on top of its tasks' timeouts: startup, environment, merging
PLACEHOLDER = "SlurmJobEnded"  # error.type of records the host writes for a job's missing tasks
DEFAULT_MAX_ARRAY_SIZE = 1001  # Slurm's default MaxArraySize (indices 0-1000)
#: how long squeue may fail in a row (slurmctld restarting, failing over) before the host gives up
SQUEUE_PATIENCE_S = 300.0


# -- validation: a whitelist per kind of value, control characters never --------------------------------
def check_name(value: str, what: str) -> str:
    if not NAME_RE.fullmatch(value):
        raise ConfigError(
            f"{what} {value!r}: use 1-64 letters, digits, '.', '_' or '-' (starting with a letter "
            "or digit); nothing else reaches the batch script"
        )
    return value


def check_path(value: str, what: str) -> str:
    check_text(value, what)
    bad = [c for c in ("\\", "%") if c in value]
    if bad:
        raise ConfigError(
            f"{what} {value!r}: a path for Slurm may not hold {', '.join(repr(c) for c in bad)} "
            "(sbatch reads backslashes as escapes and expands % in file names); choose another "
            "path"
        )
    if not value:
        raise ConfigError(f"{what}: empty path")
    return value


def check_env(name: str, value: str, what: str = "env") -> tuple[str, str]:
    if not ENV_NAME_RE.fullmatch(name):
        raise ConfigError(f"{what}: {name!r} is not a variable name (letters, digits, _)")
    check_text(value, f"{what}: {name} =")  # exported shell-quoted, never expanded
    return name, value


def check_option(option: str, what: str = "sbatch_options") -> str:
    if not OPTION_RE.fullmatch(option):
        raise ConfigError(
            f"{what}: {option!r} is not '--name' or '--name=value' with a plain value "
            "(letters, digits and _.:,@/+=&|[]*-)"
        )
    if option.split("=", 1)[0] in OWN_OPTIONS:
        raise ConfigError(
            f"{what}: {option!r} is set by the suite itself; use the site's own field for it "
            "(partition, account, qos, reservation, partitions.<p>.gres/mem/constraint/max_time) "
            "or the run's flags"
        )
    return option


# -- the batch script ----------------------------------------------------------------------
@dataclass(frozen=True)
class SbatchSpec:
    """Everything a batch script says; :func:`render_script` turns it into text."""

    job_name: str
    partition: str
    nodes: int
    ntasks_per_node: int
    time: str
    output: str
    command: list[str]  # what the job runs (exec'd): python -m suite.schedulers.job PLAN
    workdir: str
    elements: int = 1
    array_parallelism: int | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    cpus_per_task: int | None = None
    gres: str | None = None
    mem: str | None = None
    constraint: str | None = None
    options: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    module_purge: bool = False
    env: dict[str, str] = field(default_factory=dict)
    pythonpath: str | None = None
    comment: str = ""

    def validate(self) -> None:
        check_name(self.job_name, "--job-name")
        check_name(self.partition, "partition")
        for what, value in (
            ("account", self.account),
            ("qos", self.qos),
            ("reservation", self.reservation),
        ):
            if value is not None:
                check_name(value, what)
        if not TIME_RE.fullmatch(self.time):
            raise ConfigError(f"time {self.time!r}: not a Slurm time (e.g. 01:30:00 or 2-00:00:00)")
        if self.gres is not None and not GRES_RE.fullmatch(self.gres):
            raise ConfigError(f"gres {self.gres!r}: use e.g. gpu:4 or gpu:a100:4")
        if self.mem is not None and not re.fullmatch(r"[0-9]+[KMGT]?", self.mem):
            raise ConfigError(f"mem {self.mem!r}: use e.g. 500G")
        if self.constraint is not None and not re.fullmatch(
            r"[A-Za-z0-9_.&|\[\]*:,-]+", self.constraint
        ):
            raise ConfigError(f"constraint {self.constraint!r}: use node features, e.g. a100&ib")
        for count in (self.nodes, self.ntasks_per_node, self.elements):
            if not isinstance(count, int) or count < 1:
                raise ConfigError(
                    f"nodes, tasks per node and array size must be positive, got {count}"
                )
        # the directory is the user's (no %), the file name pattern the suite's own
        check_path(os.path.dirname(self.output), "output directory")
        if not re.fullmatch(r"[A-Za-z0-9._%-]+", os.path.basename(self.output)):
            raise ConfigError(f"output {self.output!r}: file name pattern like slurm-%A_%a.out")
        check_path(self.workdir, "run directory")
        if self.pythonpath is not None:
            check_path(self.pythonpath, "PYTHONPATH")
        for arg in self.command:
            check_path(arg, "job command")
        for opt in self.options:
            check_option(opt)
        for m in self.modules:
            if not MODULE_RE.fullmatch(m):
                raise ConfigError(f"modules: {m!r} is not a module name (e.g. cuda/12.4)")
        for k, v in self.env.items():
            check_env(k, v)
        check_text(self.comment, "comment")


def _set_options(*options: tuple[str, object]) -> list[str]:
    """``--<name>=<value>`` for each option that is set (not None, empty or 0), in order."""
    return [f"--{name}={value}" for name, value in options if value]


def sbatch_directives(spec: SbatchSpec) -> list[str]:
    """The ``#SBATCH`` options as arguments (sbatch parses quotes in #SBATCH lines the way a
    shell does, so each is rendered with shlex.quote)."""
    d = [f"--job-name={spec.job_name}", f"--partition={spec.partition}"]
    d += _set_options(
        ("account", spec.account), ("qos", spec.qos), ("reservation", spec.reservation)
    )
    d += [
        f"--time={spec.time}",
        f"--nodes={spec.nodes}",
        f"--ntasks-per-node={spec.ntasks_per_node}",
    ]
    d += _set_options(
        ("cpus-per-task", spec.cpus_per_task),
        ("gres", spec.gres),
        ("mem", spec.mem),
        ("constraint", spec.constraint),
    )
    array = f"0-{spec.elements - 1}"
    if spec.array_parallelism:
        array += f"%{spec.array_parallelism}"
    d += [f"--array={array}", f"--output={spec.output}", "--open-mode=append"]
    d += list(spec.options)
    return d


_MODULE_INIT = (
    "if ! command -v module >/dev/null 2>&1; then\n"
    "    for init in /etc/profile.d/lmod.sh /etc/profile.d/modules.sh "
    "/usr/share/lmod/lmod/init/bash /usr/share/modules/init/bash; do\n"
    '        if [ -r "$init" ]; then . "$init"; break; fi\n'
    "    done\n"
    "fi"
)


def render_script(spec: SbatchSpec) -> str:
    """The batch script as text. Deterministic: the same spec renders the same bytes."""
    spec.validate()
    q = shlex.quote
    lines = ["#!/bin/bash"]
    if spec.comment:
        lines.append(f"# {spec.comment}")
    lines += [f"#SBATCH {q(opt)}" for opt in sbatch_directives(spec)]
    lines.append("set -eo pipefail")  # no -u: module init scripts read unset variables
    if spec.modules or spec.module_purge:
        lines.append(_MODULE_INIT)
        if spec.module_purge:
            lines.append("module purge")
        lines += [f"module load {q(m)}" for m in spec.modules]
    for k, v in spec.env.items():
        lines.append(f"export {k}={q(v)}")
    if spec.cpus_per_task:
        # srun does not inherit sbatch's --cpus-per-task (Slurm >= 22.05); the ranks need it
        lines.append(f"export SRUN_CPUS_PER_TASK={spec.cpus_per_task}")
    if spec.pythonpath:
        lines.append(f'export PYTHONPATH={q(spec.pythonpath)}${{PYTHONPATH:+:"$PYTHONPATH"}}')
    lines.append(f"cd {q(spec.workdir)}")
    lines.append("exec " + " ".join(q(a) for a in spec.command))
    return "\n".join(lines) + "\n"


def sbatch_command(script: Path, sbatch: str = "sbatch") -> list[str]:
    return [sbatch, "--parsable", str(script)]


# -- grouping tasks into array elements --------------------------------------------------------
def group_key(task: Task) -> str:
    """Tasks that must share one element: a cross-framework agreement point (its matrix is
    computed from every framework's output) and a data-parallel size at 1 and N ranks (the
    scaling efficiency needs the 1-rank baseline of the same run), and the strategies of one
    network and framework (each is compared with the allreduce record of the same run)."""
    if task.benchmark == "agreement":
        from suite.levels.network import agreement

        return "agreement-" + agreement.point_key(task.params, task.seed)
    if task.benchmark == "data_parallel":
        # both scalings: the plan measures their 1-rank baseline once (plan._one_rank_baseline_once)
        shared = {k: v for k, v in task.params.items() if k != "scaling"}
        return "dp-" + json.dumps(
            [shared, task.framework, task.dtype, task.device, task.backend, task.seed],
            sort_keys=True,
        )
    if task.benchmark == "strategies":
        shared = {k: v for k, v in task.params.items() if k not in ("strategy", "options")}
        return "strategies-" + json.dumps(
            [shared, task.framework, task.dtype, task.device, task.backend, task.seed,
             task.world_size],
            sort_keys=True,
        )  # fmt: skip
    return task.task_id


def group_tasks(
    tasks: list[Task], per_element: int, max_elements: int | None = None
) -> list[list[Task]]:
    """Array elements, in plan order: groups that belong together, packed up to
    ``per_element`` groups per element, or more where that would make more than
    ``max_elements`` elements (Slurm refuses an array larger than its MaxArraySize)."""
    groups: dict[str, list[Task]] = {}
    for t in tasks:
        groups.setdefault(group_key(t), []).append(t)
    if max_elements and len(groups) > max_elements * per_element:
        per_element = -(-len(groups) // max_elements)
    elements: list[list[Task]] = []
    current: list[Task] = []
    n = 0
    for g in groups.values():
        if n == per_element:
            elements.append(current)
            current, n = [], 0
        current.extend(g)
        n += 1
    if current:
        elements.append(current)
    return elements


# -- Slurm's commands ------------------------------------------------------------------------
@dataclass
class JobState:
    job_id: str  # the element's own id (SLURM_JOB_ID)
    array_task_id: int | None
    state: str
    nodelist: str | None = None
    reason: str | None = None
    batch_host: str | None = None
    exit_code: str | None = None
    time_limit: str | None = None  # what the job asked for (scontrol's TimeLimit)


#: the clock of the run in progress in this process (its Slurm commands are counted on it)
_clock: HostClock | None = None


def _slurm(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    try:
        with _clock.command(argv[0]) if _clock else nullcontext():
            return subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, check=False
            )
    except FileNotFoundError:
        raise SchedulerError(
            f"{argv[0]} not found: run on a node of the Slurm cluster (a login node), or use "
            "--scheduler none"
        ) from None
    except subprocess.TimeoutExpired:
        raise SchedulerError(f"{' '.join(argv[:2])} did not answer in {timeout:g} s") from None


#: what sbatch says when it refuses a job, and the site field that caused it (``{p}``: the
#: partition); anything else is reported as sbatch said it
SBATCH_REFUSALS = (
    ("invalid partition", "partition"),
    ("invalid account", "account"),
    ("invalid qos", "qos"),
    ("reservation is invalid", "reservation"),
    ("invalid feature", "partitions.{p}.constraint"),
    ("invalid generic resource", "partitions.{p}.gres"),
    ("time limit is invalid", "partitions.{p}.max_time"),
    ("node count specification invalid", "partitions.{p}.nodes"),
    ("memory specification can not be satisfied", "partitions.{p}.mem"),
    ("more processors requested than permitted", "partitions.{p}.cpus_per_node"),
    ("node configuration is not available", "partitions.{p}.nodes/cpus_per_node/mem"),
)


#: what Slurm's commands say when they have no configuration or cannot reach slurmctld: not
#: the site profile's fault
NO_CONTROLLER = (
    "Could not establish a configuration source",
    "Unable to contact slurm controller",
    "Unable to process configuration file",
)


def refused_field(message: str, partition: str) -> str | None:
    """The site field an sbatch refusal is about (None: not one sbatch names)."""
    low = message.lower()
    for needle, where in SBATCH_REFUSALS:
        if needle in low:
            return where.format(p=partition)
    return None


#: pending reasons after which a job never starts, however long it waits: Slurm's reason codes
#: (and, without an accounting database, slurmctld's own words for a partition's
#: AllowAccounts/AllowQos/AllowGroups), each with the site field to change
NEVER_STARTS = (
    ("PartitionTimeLimit", "partitions.{p}.max_time"),
    ("PartitionNodeLimit", "partitions.{p}.nodes"),
    ("InvalidAccount", "account"),
    ("AccountNotAllowed", "account"),
    ("Job's account not", "account"),
    ("InvalidQOS", "qos"),
    ("QOSNotAllowed", "qos"),
    ("Job's QOS not", "qos"),
    ("BadConstraints", "partitions.{p}.constraint"),
    ("group not permitted to use this partition", "partition"),
)


def never_starts(reason: str | None, partition: str) -> str | None:
    """The site field to change when a pending job's ``reason`` says it will never start."""
    for needle, where in NEVER_STARTS:
        if reason and needle in reason:
            return where.format(p=partition)
    return None


def partition_limits(partition: str) -> str:
    """The cluster's own limits of a partition (``scontrol show partition``), for a message."""
    try:
        out = _slurm(["scontrol", "--oneliner", "show", "partition", partition])
    except SuiteError:
        return ""
    keys = ("MaxTime", "MaxNodes", "TotalNodes", "AllowAccounts", "AllowQos", "AllowGroups")
    found = [f"{k}={v}" for k in keys if (v := _field(out.stdout, k))]
    return f" (the cluster's partition {partition}: {' '.join(found)})" if found else ""


def site_value(site: Site, where: str) -> str:
    """``field = value`` as the site profile has it (the field alone when it is not set)."""
    if where.startswith("partitions."):
        _, name, key = where.split(".", 2)
        value = getattr(site.partitions.get(name), key, None)
    else:
        value = getattr(site, where, None)
    return f"{where} = {value!r}" if isinstance(value, (str, int)) else where


def submit(script: Path, site: Site | None = None, partition: str = "") -> str:
    """``sbatch --parsable SCRIPT`` → the job id. A refusal names the site field it is about."""
    out = _slurm(sbatch_command(script))
    if out.returncode != 0:
        msg = (out.stderr or out.stdout).strip().replace("\n", "; ")
        where = refused_field(msg, partition) if site else None
        if site is not None and where is not None:
            raise SchedulerError(
                f"site {site.path}: {site_value(site, where)}: sbatch refused the job ({msg})"
                f"{partition_limits(partition)}; change {where} in the site profile to what the "
                f"cluster offers (sinfo, scontrol show partition), then run again (script: {script})"
            )
        if any(needle in msg for needle in NO_CONTROLLER):
            raise SchedulerError(
                f"sbatch found no Slurm controller to submit to ({msg}): nothing was submitted. "
                "Run dlsuite where Slurm's commands reach the cluster (a login node; `sinfo` "
                "answers), or set SLURM_CONF to the cluster's slurm.conf (the local cluster's: "
                "cluster/local-cluster.sh env), then run again"
            )
        raise SchedulerError(
            f"sbatch refused the job ({msg}); check the site profile's partition, account, "
            f"qos and limits (script: {script})"
        )
    job_id = out.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise SchedulerError(f"sbatch --parsable printed {out.stdout.strip()!r}, not a job id")
    return job_id


#: squeue's columns: array job, the element's own job id, array index (or the range of the
#: pending ones), state, nodes, reason
SQUEUE_FORMAT = "%F|%A|%K|%T|%N|%r"


def queued(array_job_id: str) -> list[JobState]:
    """The job's elements still in the queue (``squeue``; empty once all have left)."""
    return queued_all([array_job_id])[array_job_id]


def queued_all(array_job_ids: list[str]) -> dict[str, list[JobState]]:
    """Each array job's elements still in the queue, from one ``squeue`` call whatever the
    number of arrays and elements (an array that has left the queue: an empty list). Without
    ``--array``, squeue prints the pending elements of an array on one line with their range,
    so its answer grows with the running elements, not with the array."""
    if not array_job_ids:
        return {}
    out = _slurm(["squeue", "--noheader", f"--jobs={','.join(array_job_ids)}",
                  f"--format={SQUEUE_FORMAT}"])  # fmt: skip
    if out.returncode != 0:
        # one job id that slurmctld no longer knows (long finished) is an error; with
        # several, squeue lists those it knows
        if "Invalid job id" in out.stderr and len(array_job_ids) == 1:
            return {array_job_ids[0]: []}
        raise SchedulerError(f"squeue failed: {out.stderr.strip()}")
    return parse_squeue(out.stdout, array_job_ids)


def parse_squeue(text: str, array_job_ids: list[str]) -> dict[str, list[JobState]]:
    """squeue's lines (:data:`SQUEUE_FORMAT`) as each array job's element states, a pending
    range expanded to one state per element."""
    states: dict[str, list[JobState]] = {j: [] for j in array_job_ids}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 6 or parts[0] not in states:
            continue
        array, jid, task, state, nodes, reason = parts
        why = reason if reason not in ("", "None") else None
        indices: list[int | None] = [int(task)] if task.isdigit() else list(task_ids(task))
        for index in indices or [None]:
            states[array].append(
                JobState(job_id=jid, array_task_id=index, state=state,
                         nodelist=nodes or None, reason=why)
            )  # fmt: skip
    return states


def queue_summary(queue: list[JobState]) -> str:
    """How many elements are in each state, the pending ones with why they wait (Slurm's
    reason: ``2 pending (JobArrayTaskLimit)``, a drained node's ``ReqNodeNotAvail``, a requeued
    element's ``BeginTime``), so the progress line says why nothing runs."""
    counts = Counter(
        (st.state.lower(), st.reason if st.state == "PENDING" and st.reason else "") for st in queue
    )
    return ", ".join(
        f"{n} {state}" + (f" ({why})" if why else "") for (state, why), n in sorted(counts.items())
    )


def parse_array_size(text: str) -> int:
    """MaxArraySize from ``scontrol show config`` (Slurm's default, 1001, when absent)."""
    m = re.search(r"^MaxArraySize\s*=\s*(\d+)", text, re.MULTILINE)
    return int(m.group(1)) if m else DEFAULT_MAX_ARRAY_SIZE


def max_array_size() -> int:
    """The cluster's MaxArraySize: array indices run from 0 to one less."""
    try:
        out = _slurm(["scontrol", "show", "config"])
    except SuiteError:
        return DEFAULT_MAX_ARRAY_SIZE
    return parse_array_size(out.stdout) if out.returncode == 0 else DEFAULT_MAX_ARRAY_SIZE


def _field(line: str, key: str) -> str | None:
    m = re.search(rf"(?:^|\s){key}=(\S*)", line)
    return m.group(1) if m and m.group(1) not in ("", "(null)") else None


def final_states(array_job_id: str) -> dict[int, JobState]:
    """Each element's state from ``scontrol show job`` (kept by slurmctld for MinJobAge after
    the end; there may be no accounting database)."""
    out = _slurm(["scontrol", "--oneliner", "show", "job", array_job_id])
    return final_states_from(out.stdout, array_job_id) if out.returncode == 0 else {}


def final_states_from(text: str, array_job_id: str) -> dict[int, JobState]:
    """Each element's state in ``scontrol --oneliner show job``'s answer."""
    states: dict[int, JobState] = {}
    for line in text.splitlines():
        # one line per element that ran; elements that never started share one line whose
        # ArrayTaskId is a range ("1-2%1", "3,5-7")
        for task in task_ids(_field(line, "ArrayTaskId") or ""):
            states[task] = JobState(
                job_id=_field(line, "JobId") or array_job_id,
                array_task_id=task,
                state=(_field(line, "JobState") or "UNKNOWN"),
                nodelist=_field(line, "NodeList"),
                reason=_field(line, "Reason"),
                batch_host=_field(line, "BatchHost"),
                exit_code=_field(line, "ExitCode"),
                time_limit=_field(line, "TimeLimit"),
            )
    return states


def task_ids(spec: str) -> list[int]:
    """Array indices in Slurm's notation: ``4``, ``1-3``, ``1,3,5-7``, ``0-9%2`` (throttle)."""
    out: list[int] = []
    for part in spec.split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (hi.isdigit() or not hi):
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def cancel(job_ids: list[str]) -> None:
    if job_ids:
        _slurm(["scancel", *job_ids])


# -- the scheduler ---------------------------------------------------------------------------
@dataclass
class Submission:
    """One ``sbatch`` of a job array (persisted in jobs.json)."""

    name: str  # s1, s2, ...
    job_id: str | None
    elements: list[list[str]]  # task ids per array index
    submitted_at: str
    finished: bool = False
    states: dict[str, str] = field(default_factory=dict)  # array index -> final state

    def directory(self, run_dir: Path) -> Path:
        return run_dir / "slurm" / self.name

    def part(self, run_dir: Path, index: int) -> Path:
        return self.directory(run_dir) / f"part-{index}"


class JobsFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.submissions: list[Submission] = []
        if path.exists():
            doc = json.loads(path.read_text())
            self.submissions = [Submission(**s) for s in doc["submissions"]]

    def save(self) -> None:
        write_json_atomic(self.path, {"submissions": [asdict(s) for s in self.submissions]})

    def next_name(self) -> str:
        return f"s{len(self.submissions) + 1}"


def _record_key(rec: dict[str, Any]) -> str:
    return json.dumps(
        [rec.get("task_id"), rec.get("benchmark", {}).get("params"), rec.get("rank")],
        sort_keys=True,
    )


class SlurmScheduler(Scheduler):
    name = "slurm"
    options = frozenset({"partition", "tasks_per_job", "job_name"})
    usage = "--scheduler slurm (and a --site)"

    @classmethod
    def check_options(cls, cfg: RunConfig) -> None:
        """A site profile (``--site``), a partition of it, a positive ``--tasks-per-job``, a
        ``--job-name`` Slurm takes and nothing else."""
        super().check_options(cfg)
        from suite import sites

        if not cfg.site:
            raise ConfigError(
                "--scheduler slurm needs --site NAME (a profile in sites/, e.g. --site local, or "
                "the path of one); see docs/guide/clusters.md"
            )
        if cfg.partition is not None:
            site = sites.load(cfg.site)
            if cfg.partition not in site.partitions:
                raise ConfigError(
                    f"--partition {cfg.partition!r}: site {site.name} has no such partition; "
                    f"use one of: {', '.join(sorted(site.partitions))}"
                )
        if cfg.tasks_per_job is not None and cfg.tasks_per_job < 1:
            raise ConfigError(f"--tasks-per-job {cfg.tasks_per_job}: must be a positive integer")
        if cfg.job_name is not None:
            check_name(cfg.job_name, "--job-name")

    @classmethod
    def record_section(cls, env: Mapping[str, str]) -> dict[str, Any] | None:
        """The section from the ``SLURM_*`` variables Slurm sets in a job (None outside one):
        the job, its array job and element, its nodes, partition and cluster, and the node
        this process runs on (``SLURMD_NODENAME``: each rank srun started has its own)."""
        job_id = env.get("SLURM_JOB_ID")
        if not job_id:
            return None
        task_id = env.get("SLURM_ARRAY_TASK_ID")
        return {
            "kind": "slurm",
            "job_id": job_id,
            "array_job_id": env.get("SLURM_ARRAY_JOB_ID"),
            "array_task_id": int(task_id) if task_id and task_id.isdigit() else None,
            "nodelist": env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"),
            "partition": env.get("SLURM_JOB_PARTITION"),
            "cluster": env.get("SLURM_CLUSTER_NAME"),
            "node": env.get("SLURMD_NODENAME"),
        }

    def __init__(self, cfg: RunConfig) -> None:
        super().__init__(cfg)
        from suite import sites

        self.check_options(cfg)  # resolve() did; a scheduler made from other settings too
        self.site: Site = sites.load(cfg.site or "")
        self.partition: Partition = self.site.partitions[cfg.partition or self.site.partition]
        self.poll_s = float(os.environ.get("DLSUITE_SLURM_POLL_S") or self.site.poll_interval_s)
        self.clock = HostClock()  # replaced by run()'s own
        #: how long squeue may fail (slurmctld restarting) before the host stops waiting
        self.squeue_patience_s = SQUEUE_PATIENCE_S

    # -- rendering ---------------------------------------------------------------------------
    def check_fits(self, tasks: list[Task]) -> None:
        p = self.partition
        nodes = max(t.nodes for t in tasks)
        if nodes > p.nodes:
            raise ConfigError(
                f"--nodes {nodes}: partition {p.name} of site {self.site.name} has {p.nodes} "
                "node(s); ask for fewer or choose another --partition"
            )
        per_node = max(-(-t.world_size // t.nodes) for t in tasks)
        if not p.gpus_per_node and any(t.device == "cuda" for t in tasks):
            raise ConfigError(
                f"--device cuda: partition {p.name} of site {self.site.name} has no GPUs "
                "(gpus_per_node = 0); choose a GPU partition with --partition"
            )
        if self.wants_gpus(tasks):
            if per_node > p.gpus_per_node:
                raise ConfigError(
                    f"--world-size/--nodes: {per_node} ranks per node but partition {p.name} has "
                    f"{p.gpus_per_node} GPUs per node; use --nodes "
                    f"{-(-max(t.world_size for t in tasks) // p.gpus_per_node)} or fewer ranks"
                )
        if p.cpus_per_node and per_node > p.cpus_per_node:
            raise ConfigError(
                f"{per_node} ranks per node but partition {p.name} has {p.cpus_per_node} CPUs "
                "per node; use more --nodes or fewer ranks"
            )

    def wants_gpus(self, tasks: list[Task]) -> bool:
        return bool(self.partition.gpus_per_node) and any(
            t.device in ("cuda", "auto") for t in tasks
        )

    def time_limit(self, elements: list[list[Task]]) -> str:
        p = self.partition
        if p.default_time:
            return p.default_time
        need = max(sum(t.timeout_s for t in e) for e in elements) + SLACK_S
        if p.max_time:
            need = min(need, parse_time(p.max_time))
        return format_time(need)

    def spec(self, elements: list[list[Task]], run_dir: Path, sub_dir: Path) -> SbatchSpec:
        from suite.provenance import SOURCE_ROOT

        tasks = [t for e in elements for t in e]
        self.check_fits(tasks)
        p = self.partition
        nodes = max(t.nodes for t in tasks)
        per_node = max(-(-t.world_size // t.nodes) for t in tasks)
        gpus = self.wants_gpus(tasks)
        env = dict(self.site.env)
        image_dir, _ = self.job_image_dir()
        if image_dir:
            env["DLSUITE_IMAGE_DIR"] = image_dir
        cpus_per_task = p.cpus_per_task(per_node)  # one rank per node: all the node's CPUs
        python = self.site.python or sys.executable
        job_name = self.cfg.job_name or f"dlsuite-{sub_dir.parent.parent.name}"[:64]
        job_name = re.sub(r"[^A-Za-z0-9._-]", "-", job_name) if not self.cfg.job_name else job_name
        return SbatchSpec(
            job_name=job_name,
            partition=p.name,
            nodes=nodes,
            ntasks_per_node=per_node,
            time=self.time_limit(elements),
            output=str(sub_dir / "slurm-%A_%a.out"),
            command=[python, "-m", "suite.schedulers.job", str(sub_dir / "plan.json")],
            workdir=str(run_dir),
            elements=len(elements),
            array_parallelism=self.site.array_parallelism,
            account=self.site.account,
            qos=self.site.qos,
            reservation=self.site.reservation,
            cpus_per_task=cpus_per_task,
            gres=p.gpu_gres if gpus else None,
            mem=p.mem,
            constraint=p.constraint,
            options=self.site.sbatch_options,
            modules=self.site.modules,
            module_purge=self.site.module_purge,
            env=env,
            pythonpath=str(SOURCE_ROOT) if (SOURCE_ROOT / "suite").is_dir() else None,
            comment=(
                f"dlsuite: {len(tasks)} task(s) in {len(elements)} array element(s); "
                f"site {self.site.name}, partition {p.name}"
            ),
        )

    def job_image_dir(self) -> tuple[str | None, str]:
        """The job's DLSUITE_IMAGE_DIR (None: the default, ~/.cache/dlsuite/images) and where it
        comes from. The variable where dlsuite runs wins over the site's [env] and image_dir
        (every DLSUITE_* variable wins over the site profile); it goes into the script, whose
        exports the job's inherited environment would not override."""
        mine = os.environ.get("DLSUITE_IMAGE_DIR")
        if mine:
            return str(Path(mine).expanduser().resolve()), "DLSUITE_IMAGE_DIR"
        if self.site.env.get("DLSUITE_IMAGE_DIR"):
            return self.site.env["DLSUITE_IMAGE_DIR"], f"[env] of site {self.site.name}"
        if self.site.image_dir:
            return self.site.image_dir, f"image_dir of site {self.site.name}"
        return None, "the default, as neither DLSUITE_IMAGE_DIR nor the site's image_dir is set"

    def check_sifs(self, tasks: list[Task]) -> None:
        """Every SIF the job's apptainer tasks will look for, before anything is queued: the
        image directory is the job's (the run directory and the suite's interpreter must be on
        a file system the nodes share; so must the SIFs), so a SIF missing here would fail
        every task of its framework after the job's wait in the queue."""
        from suite import images

        frameworks = sorted({t.framework for t in tasks if t.backend == "apptainer"})
        if not frameworks:
            return
        configured, source = self.job_image_dir()
        directory = images.image_dir(configured)
        missing = [
            fw
            for fw in frameworks
            if not any((directory / images.sif_name(fw, v)).is_file() for v in (None, images.CUDA))
        ]
        if missing:
            sifs = ", ".join(images.sif_name(fw) for fw in missing)
            raise ConfigError(
                f"--backend apptainer: no {sifs} in {directory} (the job's image directory: "
                f"{source}); make it with `dlsuite images sif --framework {','.join(missing)} "
                f"--dir {shlex.quote(str(directory))}`, or set DLSUITE_IMAGE_DIR (or the site's "
                "image_dir) to where the SIFs are; nothing was submitted"
            )

    def per_element(self) -> int:
        return int(self.cfg.tasks_per_job or self.site.tasks_per_job)

    def describe(self, tasks: list[Task]) -> list[str]:
        run_dir = Path(self.cfg.out or ".").resolve()
        check_path(str(run_dir), "--out")
        # packed as a cluster with Slurm's default MaxArraySize would (a dry run asks no
        # cluster; the submission reads the cluster's own)
        elements = group_tasks(tasks, self.per_element(), DEFAULT_MAX_ARRAY_SIZE)
        sub_dir = run_dir / "slurm" / "s1"
        script = render_script(self.spec(elements, run_dir, sub_dir))
        lines = [
            f"# site {self.site.name} ({self.site.path}), partition {self.partition.name}: "
            f"{len(tasks)} task(s) in an array of {len(elements)} element(s)"
        ]
        for i, e in enumerate(elements):
            lines.append(f"#   element {i}: {', '.join(t.task_id for t in e)}")
        lines.append(f"# {sub_dir / 'job.sbatch'}:")
        lines += script.rstrip("\n").splitlines()
        lines.append("# submitted with: " + shlex.join(sbatch_command(sub_dir / "job.sbatch")))
        lines.append("# (dry run: nothing written, nothing submitted)")
        return lines

    # -- running -----------------------------------------------------------------------------
    def write_submission(
        self, run_dir: Path, jobs: JobsFile, elements: list[list[Task]], run_id: str
    ) -> tuple[Submission, Path]:
        from suite.provenance import now_iso

        name = jobs.next_name()
        sub_dir = run_dir / "slurm" / name
        spec = self.spec(elements, run_dir, sub_dir)
        script = render_script(spec)
        sub_dir.mkdir(parents=True, exist_ok=True)
        plan = {
            "run_id": run_id,
            "run_dir": str(run_dir),
            "submission": name,
            "config": {**self.cfg.to_dict(), "scheduler": "none"},
            "elements": [[asdict(t) for t in e] for e in elements],
        }
        write_json_atomic(sub_dir / "plan.json", plan)
        path = sub_dir / "job.sbatch"
        path.write_text(script)
        sub = Submission(name, None, [[t.task_id for t in e] for e in elements], now_iso())
        return sub, path

    def run(self, tasks: list[Task], argv: list[str], console: Any) -> RunOutcome:
        run_dir = Path(self.cfg.out or ".").resolve()
        check_path(str(run_dir), "--out")
        self.check_sifs(tasks)
        if shutil.which("sbatch") is None:
            raise SchedulerError(
                "sbatch not found: --scheduler slurm runs where Slurm's commands are (a login "
                "node); on this machine use --scheduler none (or `make cluster-up` for the "
                "local test cluster)"
            )
        global _clock
        self.clock = _clock = HostClock()
        lock = open_run_dir(run_dir, self.cfg.resume, argv)
        try:
            return self._run_locked(run_dir, tasks, argv, console)
        finally:
            _clock = None
            self.save_clock(run_dir, argv, len(tasks))
            lock.release()

    def save_clock(self, run_dir: Path, argv: list[str], tasks: int) -> None:
        """Append what this invocation cost the host to ``slurm/host.jsonl`` (one line per
        invocation: the first run, each --resume)."""
        from suite.provenance import now_iso

        doc = {
            "finished_at": now_iso(),
            "argv": argv,
            "tasks": tasks,
            "poll_interval_s": self.poll_s,
            **self.clock.to_dict(),
        }
        try:
            with (run_dir / "slurm" / "host.jsonl").open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(doc, sort_keys=True) + "\n")
        except OSError:
            pass  # an account of the host's time; never the reason a run fails

    def _run_locked(
        self, run_dir: Path, tasks: list[Task], argv: list[str], console: Any
    ) -> RunOutcome:
        from suite.results import ResultsFile, read_records

        (run_dir / "slurm").mkdir(exist_ok=True)
        results = ResultsFile(run_dir / "results.jsonl")
        if self.cfg.resume:
            dropped = results.repair()
            if dropped:
                console.print(f"[yellow]resume: dropped a partial last line ({dropped} bytes)")
        manifest = Manifest.open(run_dir, self.cfg, argv, [t.task_id for t in tasks])
        jobs = JobsFile(run_dir / "slurm" / "jobs.json")
        by_id = {t.task_id: t for t in tasks}
        self.begin(results.path)

        def on_sigterm(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, on_sigterm)
        try:
            # 1. jobs of an earlier invocation: still queued → wait for them; ended → collect
            #    what they wrote and account for what they did not
            active = []
            earlier = [s for s in jobs.submissions if not s.finished and s.job_id is not None]
            queues = queued_all([s.job_id for s in earlier if s.job_id])
            for sub in earlier:
                self.collect(run_dir, sub, results)
                if queues[sub.job_id or ""]:
                    console.print(
                        f"resume: job {sub.job_id} ({sub.name}) is still queued; waiting for it"
                    )
                    active.append(sub)
                else:
                    self.finish(run_dir, sub, results, by_id, manifest.run_id, jobs)
            # 2. what is left: no complete record yet (none, a failed or refused one, or the
            #    placeholder of an ended job)
            running = {tid for s in active for e in s.elements for tid in e}
            done = results.complete_task_ids()
            todo = [t for t in tasks if t.task_id not in done and t.task_id not in running]
            if self.cfg.resume:
                from suite.runner import sweep_rests

                # a sweep its element's end stopped part-way (TIMEOUT, scancel: the element's
                # runner kept the points it measured) is submitted for the points it had left,
                # as a local --resume runs it; it reran whole, a time limit's sweep again
                rests = sweep_rests(todo, done, results)
                superseded = run_dir / "superseded.jsonl"
                retries = results.supersede(
                    {t.task_id for t in todo if t.task_id not in rests}, superseded
                )
                for tid in rests:
                    retries[tid] = results.retry_of_rest(tid, superseded)
                todo = [
                    replace(t, resume_params=rests[t.task_id]) if t.task_id in rests else t
                    for t in todo
                ]
                console.print(
                    f"resume: {len(tasks) - len(todo) - len(running)} of {len(tasks)} tasks "
                    f"are complete, {len(running)} in queued jobs; submitting {len(todo)}"
                    + (
                        f" ({len(rests)} sweep(s) only for the points they had left, the points "
                        "measured before are kept)"
                        if rests
                        else ""
                    )
                )
                self.begin(results.path, retries, set(rests))
            if todo:
                with self.clock.phase("submit"):
                    elements = group_tasks(todo, self.per_element(), max_array_size())
                    sub, script = self.write_submission(run_dir, jobs, elements, manifest.run_id)
                    jobs.submissions.append(sub)
                    jobs.save()
                    try:
                        sub.job_id = submit(script, self.site, self.partition.name)
                    except SchedulerError:  # the manifest says so below
                        sub.finished, sub.states = True, {"*": "REFUSED (by sbatch)"}
                        jobs.save()
                        raise
                    jobs.save()
                self.clock.counts["elements"] += len(elements)
                self.clock.counts["submitted_tasks"] += len(todo)
                console.print(
                    f"submitted job {sub.job_id}: {len(todo)} task(s) in {len(elements)} array "
                    f"element(s) on partition {self.partition.name} of {self.site.name} "
                    f"(script {script})"
                )
                active.append(sub)
                manifest.save(state="running", slurm_jobs=[s.job_id for s in jobs.submissions])
            self.wait(run_dir, active, results, by_id, manifest.run_id, jobs, console, len(tasks))
        except SchedulerError as exc:
            if manifest.doc.get("state") == "running":
                manifest.save(state="stopped", stop_reason=str(exc))
            raise
        except (KeyboardInterrupt, BrokenPipeError):  # BrokenPipeError: the output's reader gone
            live = [s for s in jobs.submissions if not s.finished and s.job_id]
            cancel([s.job_id for s in live if s.job_id])
            for s in live:
                self.collect(run_dir, s, results)
                s.finished, s.states = True, {"*": "CANCELLED (by dlsuite: interrupted)"}
            jobs.save()
            # first the state, then the word: a Ctrl-C also ends a `| tee` the output went to
            manifest.save(state="interrupted")
            if live:
                with contextlib.suppress(OSError):
                    print(
                        f"dlsuite: cancelled job(s) {', '.join(str(s.job_id) for s in live)}",
                        file=sys.stderr,
                    )
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
        all_records = list(read_records(results.path))
        manifest.save(state="finished", counts=dict(Counter(r["status"] for r in all_records)))
        return RunOutcome(run_dir, all_records, len(tasks), 0)

    def begin(
        self,
        results: Path,
        retries: dict[str, dict[str, Any]] | None = None,
        rests: set[str] | None = None,
    ) -> None:
        """What the host knows of the run's results.jsonl, read once: the records merged
        (:attr:`seen`, by task, parameters and rank) and the tasks that have one
        (:attr:`have`); every merge keeps both up to date, so no poll reads the file again.
        ``retries``: the ``retry`` section of each task a --resume runs again; ``rests``: the
        sweeps it runs for the points they had left, whose incomplete records the first of
        their new records replace (:attr:`rests`; not :attr:`seen`: a rest of one point has
        the parameters of the record that stood for it)."""
        from suite.results import is_complete, read_records

        self.rests: set[str] = set(rests or ())
        self.seen: set[str] = set()
        self.have: set[str] = set()
        for r in read_records(results, strict=False):
            if not (r.get("task_id") in self.rests and not is_complete(r)):
                self.seen.add(_record_key(r))
            if "task_id" in r:
                self.have.add(r["task_id"])
        self.retries: dict[str, dict[str, Any]] = retries or {}
        #: per array element's part (submission, index): (inode, bytes of it merged)
        self.cursors: dict[tuple[str, int], tuple[int, int]] = {}

    def cursor(self, sub: Submission, index: int) -> int:
        """Bytes of element ``index``'s part that have been read (up to a complete line)."""
        return self.cursors.get((sub.name, index), (0, 0))[1]

    def collect(self, run_dir: Path, sub: Submission, results: Any) -> int:
        """Append each part's new records to results.jsonl (complete lines only; a record
        already there is never added twice). Returns how many were added.

        Each part is read from where the last collection stopped, so a poll costs a stat per
        part plus the new lines (not every record again): a record is parsed and validated
        once, and the new records of a collection are appended in one write. A part that
        was replaced (a requeued element's runner moving records out of it) or cut shorter
        is read again from its start; what was merged already is known by its key."""
        with self.clock.phase("merge"):
            return self._collect(run_dir, sub, results)

    def _collect(self, run_dir: Path, sub: Submission, results: Any) -> int:
        from suite.results import validate_record

        new: list[dict[str, Any]] = []
        for index in range(len(sub.elements)):
            path = sub.part(run_dir, index) / "results.jsonl"
            try:
                st = os.stat(path)
            except OSError:
                continue
            inode, offset = self.cursors.get((sub.name, index), (st.st_ino, 0))
            if inode != st.st_ino or st.st_size < offset:
                offset = 0
            if st.st_size == offset:
                continue
            try:
                data = appended_lines(path, offset)
            except OSError:
                continue
            pos = consumed = 0
            for line in data.splitlines(keepends=True):
                pos += len(line)
                if not line.strip():
                    consumed = pos
                    continue
                try:
                    rec = json.loads(line)
                    key = _record_key(rec)
                except (ValueError, AttributeError):
                    continue  # a torn or invalid line: the part's own runner repairs it
                if key not in self.seen:
                    if rec.get("task_id") in self.retries:
                        rec["retry"] = self.retries[rec["task_id"]]
                    try:
                        validate_record(rec)
                    except SuiteError:
                        continue  # not a record: the part's own runner repairs it
                    new.append(rec)
                    self.seen.add(key)
                    self.have.add(rec["task_id"])
                # up to here: a bad line before this one is not read again, a bad last line is
                consumed = pos
            self.cursors[(sub.name, index)] = (st.st_ino, offset + consumed)
        # a resumed sweep's rest: its records replace the incomplete ones that stood for those
        # points, in one atomic write (the earlier points stay), as the local runner does
        replaced = {r["task_id"] for r in new} & self.rests
        for tid in sorted(replaced):
            results.replace_unfinished(
                tid, [r for r in new if r["task_id"] == tid], run_dir / "superseded.jsonl"
            )
            self.rests.discard(tid)
        rest = [r for r in new if r["task_id"] not in replaced]
        if rest:
            results.append_many(rest, validate=False)  # validated above, one by one
        return len(new)

    def finish(
        self,
        run_dir: Path,
        sub: Submission,
        results: Any,
        by_id: dict[str, Task],
        run_id: str,
        jobs: JobsFile,
    ) -> None:
        """The job has left the queue: collect, then a failed record for every task of the
        job that has none, naming the job, its element and its final state."""
        with self.clock.phase("merge"):
            self.collect(run_dir, sub, results)
            finals = final_states(sub.job_id or "")
            missing = []
            for index, ids in enumerate(sub.elements):
                st = finals.get(index)
                state = st.state if st else "UNKNOWN (no longer known to slurmctld)"
                sub.states[str(index)] = state
                for tid in ids:
                    if tid in self.have or tid not in by_id:
                        continue
                    missing.append(
                        self.placeholder(by_id[tid], run_id, sub, index, st, state, run_dir)
                    )
                    self.have.add(tid)
            if missing:
                results.append_many(missing)  # one write for the job's missing tasks
            sub.finished = True
            jobs.save()

    def placeholder(
        self,
        task: Task,
        run_id: str,
        sub: Submission,
        index: int,
        st: JobState | None,
        state: str,
        run_dir: Path,
    ) -> dict[str, Any]:
        from suite.provenance import hostname, now_iso
        from suite.results import record_skeleton

        job = f"{sub.job_id}_{index}"
        log = sub.directory(run_dir) / f"slurm-{sub.job_id}_{index}.out"
        reason = f" (reason {st.reason})" if st and st.reason not in (None, "None") else ""
        if st is None:
            which = "job id unknown"
        elif st.nodelist is None and st.job_id == sub.job_id:
            which = "it never started"
        else:
            which = f"job id {st.job_id} on {st.nodelist}"
        msg = (
            f"Slurm job {job} ({which}) ended in state {state}{reason} without a record for "
            "this task; dlsuite run --resume reruns it"
        )
        if state.split()[0] == "TIMEOUT":  # as it is, a rerun runs out of time again
            limit = f" of {st.time_limit}" if st and st.time_limit else ""
            msg = (
                f"Slurm job {job} ({which}) ran out of its time limit{limit} (state {state}) "
                f"without a record for this task; {self.timeout_fix()} in site {self.site.path}, "
                "then dlsuite run --resume reruns it"
            )
        doc = task.document(run_id=run_id, record_path="", provenance={})
        rec = record_skeleton(doc, host=(st.batch_host if st and st.batch_host else hostname()),
                              started_at=now_iso())  # fmt: skip
        word = state.split()[0]
        # Slurm's own word for memory (its cgroup saw an OOM kill in the job), as Docker's
        # OOMKilled and a worker cgroup's oom_kill count are (suite/oom.py); a job killed
        # otherwise (CANCELLED, PREEMPTED, NODE_FAIL) is failed
        status = {"TIMEOUT": "timeout", "OUT_OF_MEMORY": "oom"}.get(word, "failed")
        error = {"type": PLACEHOLDER, "message": msg + _log_tail(log)}
        if log.is_file():  # an element that never started has no output to point to
            error["log"] = str(log.relative_to(run_dir))
        if status == "oom":
            error["evidence"] = f"Slurm: job {job} ended in state {state}"
        rec.update(
            status=status,
            reason=msg[:500],
            error=error,
            scheduler={
                "kind": "slurm",
                "job_id": st.job_id if st else None,
                "array_job_id": sub.job_id,
                "array_task_id": index,
                "nodelist": st.nodelist if st else None,
                "partition": self.partition.name,
                "cluster": None,
                "state": state,
            },
        )
        return rec

    def timeout_fix(self) -> str:
        """The field an element's time limit came from: what to raise so that its rerun does
        not run out of time again."""
        p = self.partition
        if p.default_time:
            return f"raise partitions.{p.name}.default_time (now {p.default_time!r})"
        if p.max_time:
            return (
                f"put fewer tasks in an element (--tasks-per-job, now {self.per_element()}): it "
                f"asks for its tasks' timeouts plus {SLACK_S / 60:.0f} minutes, capped at "
                f"partitions.{p.name}.max_time (now {p.max_time!r})"
            )
        return f"raise --timeout (an element asks for its tasks' timeouts plus {SLACK_S / 60:.0f} minutes)"

    def wait(
        self,
        run_dir: Path,
        active: list[Submission],
        results: Any,
        by_id: dict[str, Task],
        run_id: str,
        jobs: JobsFile,
        console: Any,
        total: int,
    ) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            console=console,
            disable=not console.is_terminal and os.environ.get("DLSUITE_PROGRESS") != "1",
        )
        last_line = ""
        unanswered_since: float | None = None
        with progress:
            bar = progress.add_task("slurm", total=total, status="")
            while active:
                summary = []
                for sub in active:
                    self.collect(run_dir, sub, results)
                # one squeue for every job in the queue, whatever its size
                try:
                    queues = queued_all([s.job_id for s in active if s.job_id])
                    unanswered_since = None
                except SchedulerError as exc:
                    # slurmctld restarting or failing over: the jobs run on without it
                    now = time.monotonic()
                    if unanswered_since is None:
                        unanswered_since = now
                        console.print(
                            f"[yellow]{exc}; asking again every {self.poll_s:g} s for up to "
                            f"{self.squeue_patience_s:g} s (the jobs run on)"
                        )
                    if now - unanswered_since >= self.squeue_patience_s:
                        waited = now - unanswered_since
                        raise self.lost_contact(exc, active, run_dir, waited) from None
                    with self.clock.phase("sleep"):
                        time.sleep(self.poll_s)
                    continue
                for sub in list(active):
                    q = queues.get(sub.job_id or "", [])
                    if not q:
                        self.finish(run_dir, sub, results, by_id, run_id, jobs)
                        active.remove(sub)
                        summary.append(f"job {sub.job_id} done")
                        continue
                    self.stop_if_never_starts(run_dir, sub, q, results, jobs)
                    summary.append(f"job {sub.job_id}: {queue_summary(q)}")
                with self.clock.phase("progress"):
                    have = len(self.have & by_id.keys())
                    line = "; ".join(summary)
                    progress.update(bar, completed=have, status=line)
                    if progress.disable and line != last_line:
                        console.print(f"[{have}/{total}] {line}")
                        last_line = line
                self.clock.counts["polls"] += 1
                if active:
                    with self.clock.phase("sleep"):
                        time.sleep(self.poll_s)

    def lost_contact(
        self, exc: SchedulerError, active: list[Submission], run_dir: Path, waited: float
    ) -> SchedulerError:
        """squeue has not answered for :attr:`squeue_patience_s`: stop waiting, but leave the
        jobs alone (they run on and write their records) and say how to collect them."""
        jobs = ", ".join(s.job_id or "?" for s in active)
        return SchedulerError(
            f"{exc} (for {waited:.0f} s); stopped waiting for Slurm job(s) {jobs}, which "
            "may still be queued or running and writing their records. Once squeue answers, "
            f"dlsuite run --resume --out {shlex.quote(str(run_dir))} (and the same other "
            f"flags) waits for them and collects what they wrote; or scancel {jobs}"
        )

    def stop_if_never_starts(
        self,
        run_dir: Path,
        sub: Submission,
        queue: list[JobState],
        results: Any,
        jobs: JobsFile,
    ) -> None:
        """A job whose elements all wait for a reason that never clears (a partition's time
        or node limit, an account or QoS the partition refuses) would keep the host waiting
        for ever: once none of its elements runs, cancel it, keep what it wrote, and stop with
        the site field to change (then --resume submits the tasks again)."""
        if any(st.state != "PENDING" for st in queue):
            return  # running elements finish first; nothing measured is thrown away
        for st in queue:
            where = never_starts(st.reason, self.partition.name)
            if where is None:
                continue
            cancel([sub.job_id or ""])
            self.collect(run_dir, sub, results)
            sub.finished = True
            sub.states = {"*": f"CANCELLED (by dlsuite: pending for {st.reason}, it never starts)"}
            jobs.save()
            raise SchedulerError(
                f"site {self.site.path}: {site_value(self.site, where)}: Slurm job {sub.job_id} "
                f"would never start (pending: "
                f"{st.reason}){partition_limits(self.partition.name)}; dlsuite cancelled it. Change "
                f"{where} in the site profile to what the cluster allows, then: "
                f"dlsuite run --resume --out {shlex.quote(str(run_dir))} (and the same other flags)"
            )


def _log_tail(path: Path, n: int = 1500) -> str:
    try:
        data = path.read_bytes()[-n:].decode("utf-8", "replace")
    except OSError:
        return ""
    return f"\n--- job output (tail of {path.name}) ---\n{data}" if data else ""
