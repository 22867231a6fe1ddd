"""The storage readings of the quiet-machine check: who else reads or writes the storage that
holds a task's data.

Over a window (:class:`StorageWindow`, started and finished around it) three sources are
read, each where this machine has it:

* **the block device** behind each data path (``/proc/diskstats``): bytes read and written,
  and its utilisation (the share of the window with I/O in flight: ``io_ms``);
* **every visible process's I/O** (``/proc/<pid>/io``: ``read_bytes`` and ``write_bytes``,
  what the process caused to be read from or written to storage, page-cache hits excluded;
  root sees every process, another user only its own: the readings say how many were not
  visible). The task's own processes (this one, its children, its sibling ranks) are
  never counted as another user's: their bytes are taken out of the device's too;
* **network file-system clients**: NFS's per-mount byte counters in
  ``/proc/self/mountstats`` and Lustre's ``llite`` ``stats`` (read_bytes / write_bytes sums),
  node-wide: they see this node's traffic, never another node's (a note says so).

Nothing here opens a data file, so the storage part cannot warm the page cache: a cold read
stays cold. The verdict on these readings is part of :func:`suite.telemetry.quiet.verdict`.
Linux only; psutil is not needed (``/proc`` is read directly, a few hundred small files).
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MB = 1e6


def _finding(check: str, busy: bool, message: str, **evidence: Any) -> dict[str, Any]:
    """A quiet-check finding (the shape of suite/telemetry/quiet.py's)."""
    return {"check": check, "busy": busy, "message": message, "evidence": evidence}


def process_io() -> tuple[dict[int, tuple[str, int, int]], int]:
    """pid -> (name, read_bytes, write_bytes) of every process whose ``/proc/<pid>/io`` this
    user can read, and how many could not be read."""
    out: dict[int, tuple[str, int, int]] = {}
    hidden = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            text = Path(f"/proc/{pid}/io").read_text()
        except PermissionError:
            hidden += 1
            continue
        except OSError:  # gone meanwhile
            continue
        rb = wb = 0
        for line in text.splitlines():
            if line.startswith("read_bytes:"):
                rb = int(line.split()[1])
            elif line.startswith("write_bytes:"):
                wb = int(line.split()[1])
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            name = "?"
        out[pid] = (name, rb, wb)
    return out, hidden


def parse_mountstats(text: str) -> dict[str, dict[str, Any]]:
    """mount point -> ``{"fs_type", "device", "read_bytes", "write_bytes"}`` for the NFS
    mounts of ``/proc/self/mountstats`` (its ``bytes:`` line: the server read and write
    bytes are the 5th and 6th counters)."""
    out: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        if line.startswith("device "):
            parts = line.split()
            # device SRC mounted on MP with fstype TYPE ...
            try:
                mp = parts[parts.index("on") + 1]
                fs = parts[parts.index("fstype") + 1]
            except (ValueError, IndexError):
                current = None
                continue
            current = {"fs_type": fs, "device": parts[1]} if fs.startswith("nfs") else None
            if current is not None:
                out[mp] = current
        elif current is not None and line.strip().startswith("bytes:"):
            nums = [int(v) for v in line.split()[1:]]
            if len(nums) >= 6:
                current["read_bytes"] = nums[4]
                current["write_bytes"] = nums[5]
    return {mp: v for mp, v in out.items() if "read_bytes" in v}


def lustre_stats() -> dict[str, dict[str, int]]:
    """llite instance -> ``{"read_bytes", "write_bytes"}`` (the ``sum`` column of its stats)."""
    out: dict[str, dict[str, int]] = {}
    paths = glob.glob("/proc/fs/lustre/llite/*/stats") + glob.glob(
        "/sys/kernel/debug/lustre/llite/*/stats"
    )
    for path in paths:
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        entry = {"read_bytes": 0, "write_bytes": 0}
        for line in text.splitlines():
            parts = line.split()
            if parts and parts[0] in entry and len(parts) >= 7:
                entry[parts[0]] = int(parts[6])  # name count samples [bytes] min max sum
        out[Path(path).parent.name] = entry
    return out


@dataclass
class StorageWindow:
    """The storage readings over a window: :meth:`start`, then :meth:`finish`."""

    paths: list[str]
    own: set[int]
    mounts: list[dict[str, Any]] = field(default_factory=list)

    def start(self) -> None:
        from suite.datasets.storage import diskstats, storage_facts

        seen: set[str] = set()
        self.notes: list[str] = []
        for p in self.paths:
            try:
                facts = storage_facts(p)
            except OSError as exc:
                self.notes.append(f"{p}: cannot find its mount ({exc})")
                continue
            if facts["mount_point"] in seen:
                continue
            seen.add(facts["mount_point"])
            self.mounts.append(facts)
        self.devices = sorted({m["disk"] for m in self.mounts if m.get("disk")})
        self.t0 = time.perf_counter()
        self.disk0 = {d: v for d, v in diskstats().items() if d in self.devices}
        self.proc0, _ = process_io()
        self.nfs0 = self._nfs()
        self.lustre0 = lustre_stats() if any(m["fs_type"] == "lustre" for m in self.mounts) else {}

    def _nfs(self) -> dict[str, dict[str, Any]]:
        if not any(m["fs_type"].startswith("nfs") for m in self.mounts):
            return {}
        try:
            return parse_mountstats(Path("/proc/self/mountstats").read_text())
        except OSError:
            return {}

    def finish(self) -> dict[str, Any]:
        from suite.datasets.storage import diskstats

        wall = max(time.perf_counter() - self.t0, 1e-6)
        disk1 = diskstats()
        proc1, hidden = process_io()
        nfs1 = self._nfs()
        lustre1 = lustre_stats() if self.lustre0 else {}
        own_read = own_write = 0
        others = []
        for pid, (name, rb, wb) in proc1.items():
            before = self.proc0.get(pid)
            r0, w0 = (before[1], before[2]) if before else (0, 0)
            dr, dw = max(0, rb - r0), max(0, wb - w0)  # a process started meanwhile: all
            if pid in self.own:
                own_read, own_write = own_read + dr, own_write + dw
            elif dr or dw:
                others.append((pid, name, dr / wall, dw / wall))
        others.sort(key=lambda x: -(x[2] + x[3]))
        devices = []
        for d in self.devices:
            a, b = self.disk0.get(d), disk1.get(d)
            if a is None or b is None:
                continue
            read = 512 * (b["sectors_read"] - a["sectors_read"])
            write = 512 * (b["sectors_written"] - a["sectors_written"])
            devices.append({
                "name": d,
                "read_mb_s": read / wall / MB,
                "write_mb_s": write / wall / MB,
                "util_pct": min(100.0, 100.0 * (b["io_ms"] - a["io_ms"]) / 1000.0 / wall),
                # the device's bytes less the task's own (never negative)
                "other_read_mb_s": max(0, read - own_read) / wall / MB,
                "other_write_mb_s": max(0, write - own_write) / wall / MB,
            })  # fmt: skip
        network = []
        for m in self.mounts:
            mp = m["mount_point"]
            if mp in self.nfs0 and mp in nfs1:
                a, b = self.nfs0[mp], nfs1[mp]
                rd, wr = b["read_bytes"] - a["read_bytes"], b["write_bytes"] - a["write_bytes"]
                network.append({"mount_point": mp, "fs_type": m["fs_type"], "source": "mountstats",
                                "read_mb_s": rd / wall / MB, "write_mb_s": wr / wall / MB,
                                "other_read_mb_s": max(0, rd - own_read) / wall / MB,
                                "other_write_mb_s": max(0, wr - own_write) / wall / MB})  # fmt: skip
        for inst, b in lustre1.items():
            a = self.lustre0.get(inst)
            if a is None:
                continue
            rd, wr = b["read_bytes"] - a["read_bytes"], b["write_bytes"] - a["write_bytes"]
            network.append({"mount_point": inst, "fs_type": "lustre", "source": "llite stats",
                            "read_mb_s": rd / wall / MB, "write_mb_s": wr / wall / MB,
                            "other_read_mb_s": max(0, rd - own_read) / wall / MB,
                            "other_write_mb_s": max(0, wr - own_write) / wall / MB})  # fmt: skip
        notes = list(self.notes)
        if hidden:
            notes.append(
                f"{hidden} processes' I/O counters are not readable by this user (root sees "
                "all): their reads show only in the device's figures"
            )
        for m in self.mounts:
            if m["kind"] == "network":
                notes.append(
                    f"{m['fs_type']} at {m['mount_point']}: other nodes' traffic to the same "
                    "servers is not visible from this client"
                )
            elif not m.get("disk"):
                notes.append(m.get("block_device_reason") or f"{m['mount_point']}: no device")
        return {
            "window_s": wall,
            "paths": list(self.paths),
            "mounts": [
                {k: m[k] for k in ("mount_point", "fs_type", "kind", "block_device", "disk")}
                for m in self.mounts
            ],
            "devices": devices,
            "network_fs": network,
            "own_read_mb_s": own_read / wall / MB,
            "own_write_mb_s": own_write / wall / MB,
            "visible_processes": len(proc1),
            "hidden_processes": hidden,
            "top_other_processes": [
                {
                    "pid": pid,
                    "name": name,
                    "read_mb_s": round(r / MB, 3),
                    "write_mb_s": round(w / MB, 3),
                }
                for pid, name, r, w in others[:5]
            ],  # fmt: skip
            "notes": notes,
        }


def take_storage_readings(paths: list[str], own: set[int], window_s: float) -> dict[str, Any]:
    """The storage readings over ``window_s`` (for tests and a standalone check)."""
    w = StorageWindow(paths, own)
    w.start()
    time.sleep(window_s)
    return w.finish()


def storage_findings(storage: dict[str, Any] | None, th: Any) -> list[dict[str, Any]]:
    """The quiet check's findings on :meth:`StorageWindow.finish` readings (pure).

    Where the data's bytes are counted (its block device in ``/proc/diskstats``, its NFS or
    Lustre client), that count decides: the device busier than ``th.device_util_pct``, or
    it (or the client) moving more than ``th.other_io_mb_s`` that the task did not, is busy;
    the other processes doing I/O are named as the likely cause. (A process's own counters
    do not say which device it used: one writing a log to another disk must not make the
    data's disk busy.) Where nothing counts the data's bytes (overlayfs, FUSE), another
    process moving more than ``th.other_io_mb_s`` is busy, whatever disk it used. Memory
    file systems (tmpfs) have no storage to share. Notes say where the readings are partial.
    """
    if not storage:
        return []
    out: list[dict[str, Any]] = []
    window = storage["window_s"]
    procs = storage.get("top_other_processes", [])
    movers = [p for p in procs if p["read_mb_s"] + p["write_mb_s"] > th.other_io_mb_s]

    def who() -> str:
        shown = [p for p in procs if p["read_mb_s"] + p["write_mb_s"] > 0.1][:3]
        if not shown:
            return "; no visible process did it (another container, VM or node, or writeback)"
        return "; other processes' I/O meanwhile: " + ", ".join(
            f"{p['name']} (pid {p['pid']}, read {p['read_mb_s']:.1f} MB/s, write "
            f"{p['write_mb_s']:.1f} MB/s)"
            for p in shown
        )

    counted = False
    for d in storage.get("devices", []):
        counted = True
        other = d["other_read_mb_s"] + d["other_write_mb_s"]
        if d["util_pct"] > th.device_util_pct or other > th.other_io_mb_s:
            out.append(_finding(
                "storage_device_busy", True,
                f"the data's device {d['name']} was {d['util_pct']:.0f}% busy over "
                f"{window:.2f} s (limit {th.device_util_pct:g}%), reading {d['read_mb_s']:.1f} "
                f"and writing {d['write_mb_s']:.1f} MB/s, {other:.1f} MB/s of it not the "
                f"task's (limit {th.other_io_mb_s:g} MB/s){who()}",
                device=d["name"], util_pct=d["util_pct"], other_mb_s=other,
                limit_util_pct=th.device_util_pct, limit_mb_s=th.other_io_mb_s,
                processes=[p for p in procs if p["read_mb_s"] + p["write_mb_s"] > 0.1],
            ))  # fmt: skip
    for n in storage.get("network_fs", []):
        counted = True
        other = n["other_read_mb_s"] + n["other_write_mb_s"]
        if other > th.other_io_mb_s:
            out.append(_finding(
                "storage_network_fs_busy", True,
                f"this node's {n['fs_type']} client at {n['mount_point']} moved {other:.1f} "
                f"MB/s that was not the task's over {window:.2f} s ({n['source']}; limit "
                f"{th.other_io_mb_s:g} MB/s){who()}",
                mount_point=n["mount_point"], other_mb_s=other, limit_mb_s=th.other_io_mb_s,
            ))  # fmt: skip
    mounts = storage.get("mounts", [])
    uncounted = [
        m for m in mounts if not m.get("disk") and m.get("kind") not in ("memory", "network")
    ]
    if not counted and uncounted and movers:
        where = ", ".join(f"{m['fs_type']} at {m['mount_point']}" for m in uncounted)
        desc = ", ".join(
            f"{p['name']} (pid {p['pid']}, read {p['read_mb_s']:.1f} MB/s, write "
            f"{p['write_mb_s']:.1f} MB/s)"
            for p in movers[:3]
        )
        out.append(_finding(
            "storage_other_process_io", True,
            f"other processes read or wrote storage above {th.other_io_mb_s:g} MB/s over "
            f"{window:.2f} s; nothing counts the bytes of the data's {where} by device, so "
            f"any of it may be the data's: {desc}",
            processes=movers, limit_mb_s=th.other_io_mb_s,
        ))  # fmt: skip
    for note in storage.get("notes", []):
        out.append(_finding("storage_partial", False, note))
    return out
