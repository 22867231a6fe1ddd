"""The storage under a dataset: what it is, and what of it sits in the page cache.

* :func:`storage_facts`: the file system type and mount point of a path (the longest mount
  point that contains it, from ``/proc/self/mountinfo``), the mount's source, and the block
  device behind it where there is one (``/sys/dev/block/MAJ:MIN``; a partition's disk too),
  the name ``/proc/diskstats`` knows it by. Network and memory file systems (NFS, Lustre,
  tmpfs, overlay) have none: the record says so.
* :func:`evict`: drop a set of files from the page cache with ``posix_fadvise(DONTNEED)``
  (no root needed; dirty pages, which DONTNEED cannot drop, are written back first with one
  ``syncfs``) and
  :func:`resident_bytes` to see what is left: ``mincore(2)`` over a read-only ``mmap`` of
  each file, the way ``fincore`` does. A file system whose pages *are* the storage (tmpfs)
  or that does not pass the advice to the file below it (overlayfs on older kernels) keeps
  its pages: :func:`evict` reports ``verified: false`` and why, so a record never calls a
  warm read cold.
* :func:`io_counters` / :func:`diskstats`: this process's ``/proc/self/io`` and a block
  device's ``/proc/diskstats`` line, for the bytes a read actually took from storage.

Linux only; host side (no framework).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: file systems whose page cache is the data itself, or that are known not to evict
MEMORY_FS = {"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"}
NETWORK_FS = {"nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "beegfs", "ceph", "fuse.glusterfs"}
#: evicted when at most this share of the bytes is still resident
EVICTED_BELOW = 0.01


@dataclass(frozen=True)
class Mount:
    mount_id: int
    major_minor: str
    root: str
    mount_point: str
    fs_type: str
    source: str
    options: str


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal ``\\ooo``."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and len(field[i + 1 : i + 4]) == 3 and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """The lines of ``/proc/<pid>/mountinfo`` (man 5 proc)."""
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if "-" not in parts:
            continue
        sep = parts.index("-")
        mounts.append(
            Mount(
                mount_id=int(parts[0]),
                major_minor=parts[2],
                root=_unescape(parts[3]),
                mount_point=_unescape(parts[4]),
                fs_type=parts[sep + 1],
                source=_unescape(parts[sep + 2]) if len(parts) > sep + 2 else "",
                options=parts[sep + 3] if len(parts) > sep + 3 else "",
            )
        )
    return mounts


def mount_of(path: str | Path, mounts: list[Mount] | None = None) -> Mount:
    """The mount holding ``path``: the longest mount point that is a prefix of its real path
    (the last such mount wins: a later mount hides an earlier one at the same point)."""
    if mounts is None:
        mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    real = os.path.realpath(path)
    best: Mount | None = None
    for m in mounts:
        mp = m.mount_point
        inside = real == mp or real.startswith(mp.rstrip("/") + "/") or mp == "/"
        if inside and (best is None or len(mp) >= len(best.mount_point)):
            best = m
    if best is None:
        raise OSError(f"no mount holds {real}")
    return best


def block_device(major_minor: str, sys_root: Path = Path("/sys")) -> dict[str, Any] | None:
    """``{"name", "disk", "major_minor"}`` of a block device number: its name (``vda1``) and
    the whole disk it belongs to (``vda``); None when it is not a block device (0:NN are the
    anonymous devices of tmpfs, overlay, NFS...)."""
    base = sys_root / "dev" / "block" / major_minor
    uevent = base / "uevent"
    if not uevent.is_file():
        return None
    info = dict(line.split("=", 1) for line in uevent.read_text().splitlines() if "=" in line)
    name = info.get("DEVNAME")
    if not name:
        return None
    disk = name
    if info.get("DEVTYPE") == "partition":
        try:
            disk = (base.resolve().parent).name
        except OSError:
            pass
    return {"name": name, "disk": disk, "major_minor": major_minor, "type": info.get("DEVTYPE")}


def storage_facts(path: str | Path) -> dict[str, Any]:
    """Where ``path``'s bytes live, for the records (see the module)."""
    m = mount_of(path)
    dev = block_device(m.major_minor)
    kind = (
        "memory"
        if m.fs_type in MEMORY_FS
        else "network"
        if m.fs_type in NETWORK_FS or m.fs_type.startswith("nfs")
        else "overlay"
        if m.fs_type == "overlay"
        else "local"
    )
    out: dict[str, Any] = {
        "path": os.path.realpath(path),
        "fs_type": m.fs_type,
        "mount_point": m.mount_point,
        "mount_source": m.source,
        "mount_options": m.options,
        "major_minor": m.major_minor,
        "kind": kind,
        "block_device": dev["name"] if dev else None,
        "disk": dev["disk"] if dev else None,
    }
    if dev is None:
        out["block_device_reason"] = (
            f"{m.fs_type} at {m.mount_point} has no block device of its own "
            f"(device {m.major_minor}): /proc/diskstats cannot attribute its reads"
        )
    return out


# -- page cache ----------------------------------------------------------------------------


def _libc() -> Any:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]  # fmt: skip
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return libc


_LIBC: Any = None
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


#: a byte range is evicted in whole blocks of this size: the page cache holds a file in folios
#: of up to 2 MiB (PMD size on x86-64; ext4 and XFS use large folios on recent kernels, 6.18
#: here), and a folio only partly inside the range stays (measured: a 21-page range of a file
#: just written and read stayed resident whole, the whole file's advice dropped it)
RANGE_ALIGN = 2 << 20
#: a file to evict or check: its path, or (path, offset, length) for a byte range of it
Target = str | Path | tuple[str | Path, int, int]


def _span(target: Target) -> tuple[str | Path, int, int]:
    """(path, page-aligned offset, length to the range's end) of a target."""
    if isinstance(target, tuple):
        # whole blocks of RANGE_ALIGN: fadvise drops no partial page, nor a large folio only
        # part of which lies in the range (mm/fadvise.c, invalidate_mapping_pages)
        path, offset, length = target
        size = os.stat(path).st_size
        start = (offset // RANGE_ALIGN) * RANGE_ALIGN
        end = min(size, -(-(offset + length) // RANGE_ALIGN) * RANGE_ALIGN)
        return path, start, max(0, end - start)
    return target, 0, os.stat(target).st_size


def resident_pages(path: Target) -> tuple[int, int]:
    """(pages of the file, or of a ``(path, offset, length)`` range of it, in the page
    cache; pages of it): ``mincore`` over a read-only shared mapping (mapping reads nothing;
    only touching would)."""
    global _LIBC
    if _LIBC is None:
        _LIBC = _libc()
    path, offset, size = _span(path)
    pages = (size + PAGE - 1) // PAGE
    if size == 0:
        return 0, 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
        if addr in (None, ctypes.c_void_p(-1).value):
            err = ctypes.get_errno()
            raise OSError(err, f"mmap failed: {os.strerror(err)}", str(path))
        try:
            vec = (ctypes.c_ubyte * pages)()
            if _LIBC.mincore(addr, size, vec) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mincore failed: {os.strerror(err)}", str(path))
            return sum(b & 1 for b in vec), pages
        finally:
            _LIBC.munmap(addr, size)
    finally:
        os.close(fd)


def resident_bytes(files: Iterable[Target]) -> tuple[int, int]:
    """(bytes of ``files`` in the page cache, their total bytes), page-granular."""
    res = total = 0
    for f in files:
        r, n = resident_pages(f)
        res += r * PAGE
        total += n * PAGE
    return res, total


def _syncfs(path: str | Path) -> None:
    """``syncfs(2)`` on ``path``'s file system (``sync`` where libc has none)."""
    global _LIBC
    if _LIBC is None:
        _LIBC = _libc()
    fd = os.open(path, os.O_RDONLY)
    try:
        if getattr(_LIBC, "syncfs", None) is None or _LIBC.syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def evict(files: Sequence[Target], fs_type: str | None = None) -> dict[str, Any]:
    """Drop ``files`` (paths, or ``(path, offset, length)`` ranges: only what a cold epoch
    reads) from the page cache and check it worked (see the module).

    Returns ``{"method", "files", "bytes", "resident_before", "resident_after",
    "verified", "reason"}``: ``verified`` is True when at most :data:`EVICTED_BELOW` of the
    bytes are still resident, False with the reason otherwise."""
    first = (files[0][0] if isinstance(files[0], tuple) else files[0]) if files else None
    if fs_type is None and first is not None:
        fs_type = mount_of(first).fs_type
    before, total = resident_bytes(files)
    if first is not None:
        # dirty pages cannot be dropped: written back first, once for the file system
        # (an fsync per file took 123 s for 50,000 clean files on ext4; with one syncfs the
        # whole eviction, two mincore passes included, took 7.3 s)
        _syncfs(first)
    for f in files:
        path, offset, length = _span(f) if isinstance(f, tuple) else (f, 0, 0)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    after, _ = resident_bytes(files)
    share = after / total if total else 0.0
    verified = share <= EVICTED_BELOW
    reason = None
    if not verified:
        if fs_type in MEMORY_FS:
            reason = (
                f"{fs_type} keeps files in memory: its pages are the storage and cannot be "
                "evicted, so every read is warm"
            )
        elif fs_type == "overlay":
            reason = (
                "overlayfs did not pass the advice to the file below it (older kernels do "
                f"not): {share:.0%} of the bytes still resident; reads are not cold"
            )
        else:
            reason = (
                f"{share:.0%} of the bytes still resident after posix_fadvise(DONTNEED) on "
                f"{fs_type}: pages mapped or locked by another process stay; reads are not cold"
            )
    return {
        "method": "posix_fadvise(POSIX_FADV_DONTNEED), checked with mincore",
        "fs_type": fs_type,
        "files": len(files),
        "bytes": total,
        "resident_before": before,
        "resident_after": after,
        "resident_after_share": share,
        "verified": verified,
        "reason": reason,
    }


# -- counters ------------------------------------------------------------------------------


def io_counters(pid: int | str = "self") -> dict[str, int]:
    """``/proc/<pid>/io``: ``read_bytes`` is what the process caused to be fetched from
    storage (page-cache hits are not in it); ``rchar`` every byte read()."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k.strip()] = int(v)
    return out


#: the fields of a /proc/diskstats line (Documentation/admin-guide/iostats.rst), after
#: major, minor and name
DISKSTATS_FIELDS = (
    "reads", "reads_merged", "sectors_read", "read_ms",
    "writes", "writes_merged", "sectors_written", "write_ms",
    "in_flight", "io_ms", "weighted_io_ms",
    "discards", "discards_merged", "sectors_discarded", "discard_ms",
    "flushes", "flush_ms",
)  # fmt: skip


def parse_diskstats(text: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 7:
            continue
        values = [int(v) for v in parts[3:]]
        out[parts[2]] = dict(zip(DISKSTATS_FIELDS, values, strict=False))
    return out


def diskstats(device: str | None = None) -> dict[str, dict[str, int]]:
    """``/proc/diskstats`` by device name (sectors are 512 bytes whatever the device's own)."""
    text = Path("/proc/diskstats").read_text()
    stats = parse_diskstats(text)
    return {device: stats[device]} if device is not None and device in stats else stats


def read_files(files: list[str | Path], device: str | None = None) -> dict[str, Any]:
    """Read every byte of ``files`` (buffered, 1 MiB at a time) and say how many came from
    storage: this process's ``read_bytes`` and, with ``device``, the device's sectors read
    (which also counts any other process's reads). The evidence of a cold or warm read."""
    io0 = io_counters()
    d0 = diskstats(device).get(device) if device else None
    total = 0
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while chunk := fh.read(1 << 20):
                total += len(chunk)
    io1 = io_counters()
    d1 = diskstats(device).get(device) if device else None
    out: dict[str, Any] = {
        "bytes": total,
        "read_bytes_from_storage": io1["read_bytes"] - io0["read_bytes"],
    }
    if d0 is not None and d1 is not None:
        out["device"] = device
        out["device_bytes_read"] = 512 * (d1["sectors_read"] - d0["sectors_read"])
    return out
