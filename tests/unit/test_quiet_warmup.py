"""The quiet check over the task's warm-up (no window of its own): other load seen while the
task runs, the task's own processes (also those it starts meanwhile, such as a loader's
workers) never counted as other load, and --require-quiet refusing at the first timed
region's entry."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite.telemetry import TaskTelemetry
from suite.telemetry.host import own_pids, usable_cpus
from suite.telemetry.quiet import MIN_CPU_WINDOW_S, QuietRefusal, QuietWindow, verdict

#: a busy loop outside the test's process tree (it forks and the parent exits)
SPIN = "import os\nif os.fork():\n    os._exit(0)\nos.setsid()\nprint(os.getpid(), flush=True)\nwhile True: pass\n"


def spinners(n: int) -> list[int]:
    pids = []
    for _ in range(n):
        launcher = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
        assert launcher.stdout is not None
        pids.append(int(launcher.stdout.readline()))
        launcher.wait(timeout=30)
    return pids


def kill(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def busy_work(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_other_load_during_the_warm_up_is_found() -> None:
    pids = spinners(len(usable_cpus()))
    try:
        time.sleep(0.3)
        w = QuietWindow([], own_pids(1))
        w.begin()
        c0 = sum(os.times()[:2])
        busy_work(0.5)  # the task's warm-up
        mine = sum(os.times()[:2]) - c0
        readings = w.end(own_pids(1))
    finally:
        kill(pids)
    v = verdict(readings)
    cpu = readings["cpu"]
    assert "cpu_other_load" in [f["check"] for f in v["findings"] if f["busy"]]
    # (the loops are not always among the five heaviest named: this machine is shared)
    assert cpu["other_cores"] > 0.5 * len(usable_cpus()) and cpu["top_other_processes"]
    # the warm-up's own work is the task's, not other load
    assert mine > 0 and cpu["own_cores"] * cpu["window_s"] >= 0.8 * mine
    assert readings["window"].startswith("the task's warm-up")


def test_processes_the_task_starts_during_its_warm_up_are_its_own() -> None:
    w = QuietWindow([], own_pids(1))
    w.begin()
    # like a DataLoader's workers: started by the task after the check began
    children = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.6)
        readings = w.end(own_pids(1))
        import psutil

        spent = sum(sum(psutil.Process(c.pid).cpu_times()[:2]) for c in children)
    finally:
        for c in children:
            c.kill()
            c.wait()
    cpu = readings["cpu"]
    assert not {p["pid"] for p in cpu["top_other_processes"]} & {c.pid for c in children}
    # their CPU time is in the task's own (however much of the cores a shared machine gave)
    assert spent > 0 and cpu["own_cores"] * cpu["window_s"] >= 0.8 * spent


def test_the_check_costs_no_window_of_its_own() -> None:
    tel = TaskTelemetry(task_id="t", rank=0, world_size=1)
    tel.open("cpu")
    t0 = time.perf_counter()
    tel.quiet_begin()
    begin = time.perf_counter() - t0
    with tel.region():  # the first timed region ends the check
        pass
    quiet = tel.quiet_result
    tel.close()
    assert begin < 0.25, begin  # the window alone was 0.25 s (listing processes: ~0.1 s loaded)
    assert quiet is not None and quiet["required"] is False and "cpu" in quiet["readings"]
    assert tel.quiet_end() is quiet  # ended once


def test_require_quiet_refuses_at_the_first_timed_region(tmp_path: Path) -> None:
    pids = spinners(len(usable_cpus()))
    tel = TaskTelemetry(task_id="t", rank=0, world_size=1, series_dir=tmp_path)
    tel.open("cpu")
    try:
        time.sleep(0.3)
        tel.quiet_begin(required=True)
        busy_work(0.4)
        with pytest.raises(QuietRefusal, match=r"machine not quiet \(--require-quiet\): other"):
            with tel.region():
                pytest.fail("the region must not start")
    finally:
        kill(pids)
        tel.close()
    assert tel.quiet_result is not None and tel.quiet_result["refused"] is True
    assert not tel.segments and not list(tmp_path.iterdir())  # nothing timed, no series


#: a rank: waits for its peer to exist, then prints its pid and what it counts as its own
RANK = (
    "import json, os, time\n"
    "from suite.telemetry.host import own_pids\n"
    "time.sleep(1.5)\n"
    "print(json.dumps({'pid': os.getpid(), 'own': sorted(own_pids(2))}), flush=True)\n"
    "time.sleep(1.5)\n"
)
#: horovodrun's shape: a launcher that starts each rank through a process of its own
LAUNCHER = (
    "import subprocess, sys\n"
    "middle = 'import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))'\n"
    "procs = [subprocess.Popen([sys.executable, '-c', middle, sys.executable, '-c', sys.argv[1]])"
    " for _ in range(2)]\n"
    "print('launcher', __import__('os').getpid(), flush=True)\n"
    "sys.exit(max(p.wait() for p in procs))\n"
)


def test_a_ranks_peers_started_through_processes_of_their_own_are_its_own() -> None:
    """horovodrun starts each rank through a middle process (and a shell): the ranks share no
    parent, yet each counts the other and the launcher as its own, and not a process of
    another launch (another rendezvous port) beside them."""
    import json

    from suite.launchers.base import RANKS_FROM

    env = {**os.environ, RANKS_FROM: "horovodrun", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29517", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}  # fmt: skip
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             env={**env, "MASTER_PORT": "29518"})  # fmt: skip
    try:
        out = subprocess.run([sys.executable, "-c", LAUNCHER, RANK], env=env, capture_output=True,
                             text=True, timeout=60, check=True).stdout  # fmt: skip
    finally:
        other.kill()
        other.wait()
    lines = out.splitlines()
    launcher = int(next(x for x in lines if x.startswith("launcher")).split()[1])
    # the two ranks write to one pipe at about the same moment: a line may hold both objects
    ranks = [json.loads(x) for x in re.findall(r"\{[^{}]*\}", out)]
    assert len(ranks) == 2, out
    for me, peer in (ranks, ranks[::-1]):
        assert {me["pid"], peer["pid"], launcher} <= set(me["own"]), (me, peer, launcher)
        assert other.pid not in me["own"]


def test_a_window_too_short_for_the_cpu_ticks_is_not_judged() -> None:
    """The kernel counts CPU time in 10 ms ticks: over a few ms one tick of another process
    reads as most of a core (the quick network level's agreement tasks were "busy" with 4 of
    2 cores busy over 5 ms). Such a window gives a note, not a verdict of busy."""
    cpu = {"window_s": 0.015, "usable_cores": 2, "logical_cpus": 2, "busy_cores": 2.6,
           "own_cores": 1.3, "other_cores": 1.3, "steal_cores": 0.0, "loadavg_1m": 1.1,
           "top_other_processes": []}  # fmt: skip
    v = verdict({"cpu": cpu, "gpus": []})
    assert v["quiet"] is True
    (note,) = [f for f in v["findings"] if f["check"] == "cpu_window_short"]
    assert note["busy"] is False and "not judged" in note["message"] and "15 ms" in note["message"]
    # the same load over a window long enough is judged
    v = verdict({"cpu": {**cpu, "window_s": MIN_CPU_WINDOW_S}, "gpus": []})
    assert [f["check"] for f in v["findings"] if f["busy"]] == ["cpu_other_load"]


def test_a_timed_region_right_after_the_start_waits_out_the_window_and_sees_other_load() -> None:
    """No warm-up at all: the first timed region stretches the window to what the ticks need,
    and load running meanwhile is found. A task that times nothing is not held up."""
    pids = spinners(len(usable_cpus()))
    tel = TaskTelemetry(task_id="t", rank=0, world_size=1)
    tel.open("cpu")
    try:
        time.sleep(0.3)
        tel.quiet_begin()
        t0 = time.perf_counter()
        with tel.region():
            waited = time.perf_counter() - t0
    finally:
        kill(pids)
        tel.close()
    quiet = tel.quiet_result
    assert quiet is not None and quiet["readings"]["cpu"]["window_s"] >= MIN_CPU_WINDOW_S
    assert waited >= 0.8 * MIN_CPU_WINDOW_S
    assert quiet["quiet"] is False, quiet["findings"]
    assert "cpu_other_load" in [f["check"] for f in quiet["findings"] if f["busy"]]

    untimed = TaskTelemetry(task_id="u", rank=0, world_size=1)
    untimed.open("cpu")
    untimed.quiet_begin()
    t0 = time.perf_counter()
    result = untimed.quiet_end()
    ended = time.perf_counter() - t0
    untimed.close()
    assert result is not None and ended < MIN_CPU_WINDOW_S / 2
    assert "cpu_window_short" in [f["check"] for f in result["findings"]]


def test_processes_the_task_starts_and_ends_during_its_warm_up_are_its_own() -> None:
    """A loader's workers for a warm-up pass, ended and reaped before the timed pass starts
    (JAX's and MXNet's warm loader tasks): their CPU time reaches the task through its
    children's times, not as other load (it was: 1.6 of 2 cores "other", none named)."""
    w = QuietWindow([], own_pids(1))
    w.begin()
    c0 = os.times().children_user + os.times().children_system
    for _ in range(2):
        child = subprocess.Popen([sys.executable, "-c", SPIN_FOR])
        child.wait(timeout=30)  # reaped: the time is in this process's children's times
    spent = os.times().children_user + os.times().children_system - c0
    readings = w.end(own_pids(1))
    cpu = readings["cpu"]
    assert spent > 0.5
    # (whether the window is quiet is not asserted: other tests' busy loops may run beside it)
    assert cpu["own_cores"] * cpu["window_s"] >= 0.8 * spent, cpu


#: a child that keeps a core busy for 0.4 s of CPU time and exits
SPIN_FOR = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"
