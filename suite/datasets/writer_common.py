"""What the format writers share (``python -m suite.datasets.writers_<fmt> write PLAN.json``).

The host (:mod:`suite.datasets.formats`) writes a plan: the source folder, the output
directory, and the shards, each a list of samples ``[relpath, label, key]`` in the order they
go in. A writer runs in the environment of the framework whose writer it uses, writes the
shards, reads every record back with that framework's reader and compares it with the source
(the bytes identical, by SHA-256; the label the same), and prints one JSON result line on
stdout. Progress goes to stderr as ``progress <done> <total> <phase>`` lines.

Imports no framework itself (the writer modules do, inside their functions).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Sample = tuple[str, int, str]  # (relpath under the source folder, label, key)


def load_plan(path: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(Path(path).read_text())
    return doc


def samples(plan: dict[str, Any]) -> list[Sample]:
    return [(s[0], int(s[1]), s[2]) for shard in plan["shards"] for s in shard["samples"]]


def progress(done: int, total: int, phase: str) -> None:
    print(f"progress {done} {total} {phase}", file=sys.stderr, flush=True)


class Progress:
    """Prints a progress line at most every ``every_s`` seconds, and the last one."""

    def __init__(self, total: int, phase: str, every_s: float = 0.25) -> None:
        self.total, self.phase, self.every_s = total, phase, every_s
        self.done, self.last = 0, 0.0

    def step(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        if now - self.last >= self.every_s or self.done == self.total:
            self.last = now
            progress(self.done, self.total, self.phase)


def read_source(plan: dict[str, Any], relpath: str) -> bytes:
    return (Path(plan["source"]) / relpath).read_bytes()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


#: ``wrote(key, data, label)``: one sample is in the shard, under the key its reader gives back
Wrote = Callable[[str, bytes, int], None]


def write_shards(
    plan: dict[str, Any],
    what: str,
    write_shard: Callable[[Path, dict[str, Any], Wrote], list[str]],
) -> tuple[dict[str, tuple[str, int]], dict[str, Any]]:
    """Every shard of ``plan`` written into its output folder by ``write_shard(out, shard,
    wrote)``, which calls ``wrote`` after each sample and returns the shard's file names; a
    progress line as it goes. Returns what was written (key -> SHA-256 of the bytes, label)
    and the manifest's entry (files, records, label base)."""
    out = Path(plan["out"])
    out.mkdir(parents=True, exist_ok=True)
    expected: dict[str, tuple[str, int]] = {}
    total = sum(len(s["samples"]) for s in plan["shards"])
    bar = Progress(total, f"writing {what}")

    def wrote(key: str, data: bytes, label: int) -> None:
        expected[key] = (sha(data), int(label))
        bar.step()

    files: list[str] = []
    for shard in plan["shards"]:
        files += write_shard(out, shard, wrote)
    return expected, {"files": files, "records": total, "label_base": 0}


class Checker:
    """Compares what a reader gives back with what was written: every key once, the bytes
    identical, the label the same."""

    def __init__(self, expected: dict[str, tuple[str, int]]) -> None:
        self.expected = expected
        self.seen: dict[str, int] = {}
        self.bytes_mismatch: list[str] = []
        self.label_mismatch: list[str] = []
        self.unknown: list[str] = []

    def see(self, key: str, data: bytes, label: int) -> None:
        self.seen[key] = self.seen.get(key, 0) + 1
        want = self.expected.get(key)
        if want is None:
            self.unknown.append(key)
            return
        if sha(data) != want[0]:
            self.bytes_mismatch.append(key)
        if int(label) != want[1]:
            self.label_mismatch.append(key)

    def result(self, reader: str, seconds: float) -> dict[str, Any]:
        missing = [k for k in self.expected if k not in self.seen]
        dupes = [k for k, n in self.seen.items() if n > 1]
        passed = not (
            missing or dupes or self.bytes_mismatch or self.label_mismatch or self.unknown
        )
        return {
            "reader": reader,
            "records": sum(self.seen.values()),
            "expected": len(self.expected),
            "missing": len(missing),
            "duplicated": len(dupes),
            "unknown": len(self.unknown),
            "bytes_mismatch": len(self.bytes_mismatch),
            "label_mismatch": len(self.label_mismatch),
            "examples": (missing + dupes + self.bytes_mismatch + self.label_mismatch)[:5],
            "passed": passed,
            "seconds": seconds,
        }


def main(
    argv: list[str],
    write: Callable[[dict[str, Any]], tuple[dict[str, tuple[str, int]], dict[str, Any]]],
    verify: Callable[[dict[str, Any], dict[str, tuple[str, int]]], dict[str, Any]],
    versions: Callable[[], dict[str, Any]],
) -> int:
    """``write PLAN.json``: write, then verify; one JSON line on stdout."""
    if len(argv) != 2 or argv[0] != "write":
        print("usage: python -m suite.datasets.writers_<fmt> write PLAN.json", file=sys.stderr)
        return 2
    plan = load_plan(argv[1])
    t0 = time.perf_counter()
    expected, written = write(plan)
    t1 = time.perf_counter()
    check = verify(plan, expected)
    out = {
        "format": plan["format"],
        "written": written,
        "write_seconds": t1 - t0,
        "verify": check,
        "versions": versions(),
    }
    print(json.dumps(out), flush=True)
    return 0 if check["passed"] else 1
