"""Storage in the quiet check: the verdict on injected readings, and real competing readers
and writers (a process reading a file after dropping it from the page cache, with O_DIRECT,
or writing with fsync) that the check must flag, on the machine's own disk and, as root, on a
loop device only the test uses (where "without it, quiet" can be asserted on a shared
machine)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from suite.telemetry import TaskTelemetry
from suite.telemetry.host import own_pids
from suite.telemetry.quiet import Thresholds, take_readings, verdict
from suite.telemetry.storage import StorageWindow, parse_mountstats, storage_findings

#: a competing process: reads (buffered after DONTNEED, or O_DIRECT) or writes with fsync,
#: until killed. It leaves the test's process tree first (forks, the parent exits): a
#: descendant of the task's process is the task's own and never another user's.
COMPETITOR = r"""
import mmap, os, sys
if os.fork():
    os._exit(0)
os.setsid()
path, mode = sys.argv[1], sys.argv[2]
print(os.getpid(), flush=True)
if mode == "direct":
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, 1 << 20)
    size = os.fstat(fd).st_size >> 20
    n = 0
    while True:
        os.preadv(fd, [buf], (n % size) << 20)
        n += 1
elif mode == "read":
    fd = os.open(path, os.O_RDONLY)
    while True:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        off = 0
        while b := os.pread(fd, 1 << 20, off):
            off += len(b)
else:
    block = os.urandom(1 << 20)
    while True:
        with open(path, "wb") as fh:
            for _ in range(16):
                fh.write(block)
            fh.flush()
            os.fsync(fh.fileno())
"""


def storage(devices: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "window_s": 0.25,
        "mounts": [
            {
                "mount_point": "/data",
                "fs_type": "ext4",
                "kind": "local",
                "block_device": "vda",
                "disk": "vda",
            }
        ],  # fmt: skip
        "devices": devices if devices is not None else [dev()],
        "network_fs": [],
        "top_other_processes": [],
        "notes": [],
    }
    base.update(kw)
    return base


def dev(util: float = 0.0, other_read: float = 0.0, other_write: float = 0.0) -> dict[str, Any]:
    return {"name": "vda", "read_mb_s": other_read, "write_mb_s": other_write,
            "util_pct": util, "other_read_mb_s": other_read, "other_write_mb_s": other_write}  # fmt: skip


def busy(v: dict[str, Any]) -> list[str]:
    return [f["check"] for f in v["findings"] if f["busy"]]


# -- the verdict on injected readings ---------------------------------------------------------
def test_idle_storage_is_quiet_and_each_kind_of_traffic_is_busy() -> None:
    assert verdict({"storage": storage()})["quiet"] is True
    v = verdict({"storage": storage([dev(util=80.0)])})
    assert busy(v) == ["storage_device_busy"] and "80% busy" in v["findings"][0]["message"]
    reader = {"pid": 42, "name": "dd", "read_mb_s": 300.0, "write_mb_s": 0.0}
    v = verdict({"storage": storage([dev(util=20.0, other_read=300.0)],
                                    top_other_processes=[reader])})  # fmt: skip
    (f,) = v["findings"]
    assert f["check"] == "storage_device_busy" and "dd (pid 42, read 300.0 MB/s" in f["message"]
    # below both thresholds: quiet (a log's writeback)
    assert verdict({"storage": storage([dev(util=5.0, other_write=2.0)])})["quiet"]
    th = Thresholds(other_io_mb_s=1.0)
    assert verdict({"storage": storage([dev(util=5.0, other_write=2.0)])}, th)["quiet"] is False


def test_a_process_busy_on_another_disk_does_not_make_the_datas_disk_busy() -> None:
    writer = {"pid": 7, "name": "logger", "read_mb_s": 0.0, "write_mb_s": 50.0}
    assert verdict({"storage": storage([dev()], top_other_processes=[writer])})["quiet"]
    # where nothing counts the data's bytes by device (overlayfs), the process decides
    overlay = [{"mount_point": "/", "fs_type": "overlay", "kind": "overlay",
                "block_device": None, "disk": None}]  # fmt: skip
    v = verdict({"storage": storage([], mounts=overlay, top_other_processes=[writer])})
    assert (
        busy(v) == ["storage_other_process_io"] and "logger (pid 7" in v["findings"][0]["message"]
    )
    # a memory file system has no storage to share
    tmpfs = [{"mount_point": "/dev/shm", "fs_type": "tmpfs", "kind": "memory",
              "block_device": None, "disk": None}]  # fmt: skip
    assert verdict({"storage": storage([], mounts=tmpfs, top_other_processes=[writer])})["quiet"]


def test_network_file_system_traffic_and_partial_readings() -> None:
    nfs = {"mount_point": "/nfs", "fs_type": "nfs4", "source": "mountstats", "read_mb_s": 40.0,
           "write_mb_s": 0.0, "other_read_mb_s": 40.0, "other_write_mb_s": 0.0}  # fmt: skip
    v = verdict({"storage": storage([], network_fs=[nfs], notes=["3 processes' I/O ..."])})
    assert busy(v) == ["storage_network_fs_busy"]
    notes = [f for f in v["findings"] if not f["busy"]]
    assert [f["check"] for f in notes] == ["storage_partial"]
    assert storage_findings(None, Thresholds()) == []


def test_nfs_mountstats_parsing() -> None:
    text = (
        "device proc mounted on /proc with fstype proc\n"
        "device srv:/export mounted on /data with fstype nfs4 statvers=1.1\n"
        "\topts:\trw,vers=4.2\n"
        "\tbytes:\t100 200 300 400 5000 6000 7 8\n"
    )
    got = parse_mountstats(text)
    assert got == {"/data": {"fs_type": "nfs4", "device": "srv:/export",
                             "read_bytes": 5000, "write_bytes": 6000}}  # fmt: skip


# -- real competing processes -----------------------------------------------------------------
class Competitor:
    """A competing process outside the test's process tree (see COMPETITOR)."""

    def __init__(self, path: Path, mode: str) -> None:
        launcher = subprocess.Popen(
            [sys.executable, "-c", COMPETITOR, str(path), mode], stdout=subprocess.PIPE, text=True
        )
        assert launcher.stdout is not None
        self.pid = int(launcher.stdout.readline())
        launcher.wait(timeout=30)
        assert self.pid not in own_pids(1)
        time.sleep(0.3)  # it is reading by now

    def stop(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        for _ in range(100):
            try:
                state = Path(f"/proc/{self.pid}/stat").read_text().split()[2]
            except OSError:
                return
            if state == "Z":  # killed; its reaper collects it
                return
            time.sleep(0.05)


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    f = tmp_path_factory.mktemp("storage") / "big.bin"
    with f.open("wb") as fh:
        for _ in range(64):
            fh.write(os.urandom(1 << 20))
        os.fsync(fh.fileno())
    return f


def storage_readings(paths: list[str], window_s: float = 0.5) -> dict[str, Any]:
    return take_readings([], own_pids(1), window_s, with_cpu=False, storage_paths=paths)


@pytest.mark.parametrize("mode", ["read", "direct"])
def test_a_real_reader_on_the_datas_disk_is_flagged_and_named(big_file: Path, mode: str) -> None:
    """On the machine's own disk, which others share: the reader must be found (whatever
    else runs); "without it, quiet" is the loop-device test's."""
    if _fs(big_file) in ("tmpfs", "overlay"):
        pytest.fail(f"{big_file} is on {_fs(big_file)}: this test needs a block device")
    proc = Competitor(big_file, mode)
    try:
        r = storage_readings([str(big_file.parent)])
    finally:
        proc.stop()
    v = verdict(r)
    found = [f for f in v["findings"] if f["check"] == "storage_device_busy"]
    assert found, v["findings"]
    pids = {p["pid"] for p in found[0]["evidence"]["processes"]}
    assert proc.pid in pids, (proc.pid, found[0]["message"])
    mine = next(p for p in r["storage"]["top_other_processes"] if p["pid"] == proc.pid)
    assert mine["read_mb_s"] > Thresholds().other_io_mb_s


def _fs(path: Path) -> str:
    from suite.datasets.storage import storage_facts

    return str(storage_facts(path)["fs_type"])


def test_the_tasks_own_reads_are_never_another_users(big_file: Path) -> None:
    """This process reads during the window: its bytes are the task's, not a finding."""
    own = own_pids(1)
    w = StorageWindow([str(big_file.parent)], own)
    w.start()
    fd = os.open(big_file, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while os.read(fd, 1 << 20):
            pass
    finally:
        os.close(fd)
    got = w.finish()
    assert got["own_read_mb_s"] * got["window_s"] >= 60  # the 64 MB came from storage
    assert all(p["pid"] not in own for p in got["top_other_processes"])
    for d in got["devices"]:  # the device's reads less ours: what others read
        assert d["other_read_mb_s"] < d["read_mb_s"] - 0.8 * got["own_read_mb_s"] + 1


def test_task_telemetry_puts_the_storage_readings_in_the_verdict(big_file: Path) -> None:
    tel = TaskTelemetry(task_id="t", rank=0, world_size=1)
    tel.open("cpu")
    try:
        q = tel.quiet_check(0.2, storage_paths=[str(big_file)])
    finally:
        tel.close()
    st = q["readings"]["storage"]
    assert st["paths"] == [str(big_file)] and st["mounts"][0]["mount_point"]
    assert st["window_s"] >= 0.2


# -- as root: a block device only the test uses -----------------------------------------------
@pytest.fixture
def loop_disk(tmp_path: Path) -> Iterator[Path]:
    """A real ext4 file system on a loop device of its own (64 MiB), mounted for the test."""
    image = tmp_path / "disk.img"
    with image.open("wb") as fh:
        fh.truncate(96 << 20)
    dev = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True,
                         text=True, check=True).stdout.strip()  # fmt: skip
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        # Inode tables and journal written now: by default the kernel's ext4lazyinit thread
        # zeroes them after the mount, in the background, and the quiet check saw it (6 MB
        # written in its 0.5 s window by no process: a failure in one of six unit-test runs)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0",
                        dev], check=True, capture_output=True)  # fmt: skip
        subprocess.run(["mount", dev, str(mnt)], check=True)
        try:
            with (mnt / "data.bin").open("wb") as fh:
                for _ in range(48):
                    fh.write(os.urandom(1 << 20))
                os.fsync(fh.fileno())
            os.sync()
            yield mnt
        finally:
            subprocess.run(["umount", "-l", str(mnt)], check=False)
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)


@pytest.mark.root
def test_on_a_disk_of_its_own_quiet_without_a_competitor_busy_with_one(loop_disk: Path) -> None:
    data = loop_disk / "data.bin"
    time.sleep(1.0)  # the mount's own journal commit settles
    quiet = verdict(storage_readings([str(data)]))
    assert not busy(quiet), quiet["findings"]
    assert quiet["readings"]["storage"]["devices"][0]["name"].startswith("loop")
    for mode, target in (("direct", data), ("read", data), ("write", loop_disk / "out.bin")):
        proc = Competitor(target, mode)
        try:
            v = verdict(storage_readings([str(data)]))
        finally:
            proc.stop()
        assert busy(v) == ["storage_device_busy"], (mode, v["findings"])
        assert proc.pid in {p["pid"] for p in v["findings"][0]["evidence"]["processes"]}, mode
