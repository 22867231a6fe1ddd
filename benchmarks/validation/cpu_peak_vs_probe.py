"""The suite's CPU peak against a C probe of the same machine: the clock the suite measures
(suite/cpuinfo.py: dependent adds from machine code it maps itself, one thread per usable
core) against the clock of a compiled probe (benchmarks/validation/cpu_probe.c, one process
pinned to each physical core, all at once), and the FLOP per cycle the suite takes from the ISA flags against
the FMA throughput the probe measures (256-bit, 512-bit, AVX512_BF16 dot products).

    python -m benchmarks.validation.cpu_peak_vs_probe [--rounds 5] [--markdown FILE] [--smoke]

Rounds alternate the suite's measurement and the probe's. Judged: the suite's clock within
0.95-1.05 of the probe's (the median of the rounds' ratios, and at least half the rounds), and
the suite's fp32 and bf16 FLOP per cycle within 0.85-1.15 of the probe's widest FMA. Also shown:
the clock /proc/cpuinfo reports (a VM's base clock) and the peak it would give. Needs a C
compiler (``cc``, else ``gcc``) that targets this CPU (``-march=native``); x86-64 only.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.validation import SMOKE_HELP, judge
from suite import cpuinfo

SOURCE = Path(__file__).with_name("cpu_probe.c")
CLOCK_TARGET = (0.95, 1.05)
WIDTH_TARGET = (0.85, 1.15)


def build(out: Path) -> Path:
    """The probe compiled for this CPU; exit 2 with the reason where it cannot be."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("cpu_peak_vs_probe: no C compiler (cc, gcc) on PATH; install one (Debian: gcc)")
    binary = out / "cpu_probe"
    proc = subprocess.run(
        [cc, "-O2", "-march=native", "-o", str(binary), str(SOURCE)],
        capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"cpu_peak_vs_probe: {cc} could not build {SOURCE.name}:\n{proc.stderr}")
    return binary


def one_cpu_per_core() -> list[int]:
    """One usable CPU of each physical core (the first of its SMT siblings in sysfs): two
    probes on one core's threads would share its FMA pipes and each read half."""
    cpus = sorted(os.sched_getaffinity(0))
    chosen: dict[str, int] = {}
    for c in cpus:
        try:
            siblings = Path(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list")
            chosen.setdefault(siblings.read_text().strip(), c)
        except OSError:
            return cpus
    return sorted(chosen.values())


def probe(binary: Path, seconds: float) -> list[dict[str, float | None]]:
    """One probe process pinned to each physical core, started together; each one's
    figures."""
    procs = [
        subprocess.Popen(
            [str(binary), str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=functools.partial(os.sched_setaffinity, 0, {cpu}),
        )
        for cpu in one_cpu_per_core()
    ]
    rows = []
    for p in procs:
        out = p.communicate(timeout=120)[0]
        if p.returncode != 0:
            sys.exit(f"cpu_peak_vs_probe: the probe failed ({p.returncode}): {out}")
        fields = dict(kv.split("=", 1) for kv in out.split())
        rows.append({k: None if v == "na" else float(v) for k, v in fields.items()})
    return rows


def probe_clock(row: dict[str, float | None]) -> float:
    """A probe process's clock: the higher of its two readings (before and after the FMAs)."""
    return max(float(row["clock_ghz"] or 0), float(row["clock_after_ghz"] or 0))


def per_cycle(rows: list[dict[str, float | None]], key: str) -> float | None:
    """FLOP per cycle per core of ``key`` (a rate in GFLOP/s): each process's rate over its
    own clock, the mean over the processes."""
    values = [float(r[key]) / probe_clock(r) for r in rows if r.get(key) is not None]
    return statistics.mean(values) if values else None


def arguments(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.validation.cpu_peak_vs_probe",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    ap.add_argument("--seconds", type=float, default=0.2, help="per probe loop (default 0.2)")
    ap.add_argument("--markdown", type=Path, help="also write the tables as Markdown here")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args(argv)
    if args.smoke:
        args.rounds, args.seconds = 2, 0.05
    if args.rounds < 1 or args.seconds <= 0:
        ap.error("--rounds and --seconds must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(sys.argv[1:] if argv is None else argv)
    if not cpuinfo.x86_64():
        sys.exit(f"cpu_peak_vs_probe: the probe is x86-64 code; this is {platform.machine()}")
    facts = cpuinfo.cpu_facts()
    cores = len(one_cpu_per_core())
    with tempfile.TemporaryDirectory(prefix="cpu-probe-") as tmp:
        binary = build(Path(tmp))
        rounds = []
        for _ in range(args.rounds):
            suite = cpuinfo.measure_clock_ghz(seconds=5 * args.seconds)
            rows = probe(binary, args.seconds)
            rounds.append((suite, statistics.mean(probe_clock(r) for r in rows), rows))
    if any(s is None for s, _, _ in rounds):
        sys.exit("cpu_peak_vs_probe: the suite measured no clock here (no executable mapping?)")
    ratios = [float(s) / p for s, p, _ in rounds if s is not None]
    clock_ok, clock_verdict = judge(ratios, *CLOCK_TARGET)

    flags, vendor = cpuinfo.flags(), cpuinfo.vendor()
    family, model = facts.get("cpu family"), facts.get("model")
    suite_fp32 = cpuinfo.fp32_flops_per_cycle(
        flags, vendor, int(family) if family else None, int(model) if model else None
    )
    suite_clock = max(float(s) for s, _, _ in rounds if s is not None)
    est = cpuinfo.estimate_peak(suite_clock)
    suite_bf16 = suite_fp32 * est.tflops["bf16"] / est.tflops["fp32"]
    all_rows = [r for _, _, rows in rounds for r in rows]
    p256, p512, pbf16 = (per_cycle(all_rows, k) for k in
                         ("fma256_gflops", "fma512_gflops", "dpbf16_gflops"))  # fmt: skip
    widest = p512 if p512 is not None else p256
    reported = cpuinfo.estimate_peak()  # the clock cpufreq or /proc/cpuinfo gives

    title = (f"{cpuinfo.model_name()} (family {family} model {model}), {cores} physical cores: "
             f"the suite's clock against a C probe's")  # fmt: skip
    table = Table(title=title)
    for col in ("round", "suite clock (GHz)", "probe clock (GHz)", "ratio suite/probe"):
        table.add_column(col, justify="right")
    for i, (s, p, _) in enumerate(rounds, 1):
        table.add_row(str(i), f"{s:.3f}", f"{p:.3f}", f"{float(s) / p:.3f}")
    console = Console(width=150)
    console.print(table)
    print(f"clock ratio suite/probe = {statistics.median(ratios):.3f}: {clock_verdict} "
          f"(target {CLOCK_TARGET[0]}-{CLOCK_TARGET[1]})")  # fmt: skip

    width = Table(title="FLOP per cycle per core: the suite's (ISA flags) against the probe's")
    for col in ("dtype", "suite", "probe", "probe's instruction", "ratio suite/probe"):
        width.add_column(col, justify="right")
    width_rows = []
    for dtype, mine, theirs, what in (
        ("fp32", float(suite_fp32), widest, "512-bit FMA" if p512 is not None else "256-bit FMA"),
        ("bf16", suite_bf16, pbf16, "vdpbf16ps (512-bit)"),
    ):
        ratio = mine / theirs if theirs else None
        width_rows.append((dtype, mine, theirs, what, ratio))
        width.add_row(dtype, f"{mine:.0f}", "not built" if theirs is None else f"{theirs:.1f}",
                      what, "-" if ratio is None else f"{ratio:.3f}")  # fmt: skip
    if p512 is not None:
        width.add_row("fp32", "", f"{p256:.1f}", "256-bit FMA (shown)", "")
    console.print(width)
    judged = [r for r in width_rows if r[4] is not None]
    width_ok = all(WIDTH_TARGET[0] <= float(r[4]) <= WIDTH_TARGET[1] for r in judged)
    width_verdict = (
        ("met" if width_ok else "NOT met")
        + f" (target {WIDTH_TARGET[0]}-{WIDTH_TARGET[1]}; "
        + ", ".join(f"{r[0]} {float(r[4]):.3f}" for r in judged)
        + ")"
    )
    print(f"FLOP/cycle ratio suite/probe: {width_verdict}")
    print(f"peak with the measured clock: {est.tflops['fp32']:.3f} TFLOP/s fp32, "
          f"{est.tflops['bf16']:.3f} bf16 ({est.source})")  # fmt: skip
    print(f"peak with the reported clock: {reported.tflops.get('fp32', 0):.3f} TFLOP/s fp32, "
          f"{reported.tflops.get('bf16', 0):.3f} bf16 ({reported.source})")  # fmt: skip
    if args.smoke:
        print("smoke run (2 short rounds): it ran end to end; the ratios mean nothing")
    if args.markdown:
        cmd = " ".join(["python -m benchmarks.validation.cpu_peak_vs_probe", *sys.argv[1:]])
        lines = [
            f"# The suite's CPU clock and FLOP/cycle against a C probe on {cpuinfo.model_name()}",
            "",
            f"{title}. Host: {platform.node()}, {time.strftime('%Y-%m-%d %H:%M')}. Command: "
            f"`{cmd}`.",
            "",
            "| round | suite clock (GHz) | probe clock (GHz) | ratio suite/probe |",
            "|---:|---:|---:|---:|",
            *(
                f"| {i} | {s:.3f} | {p:.3f} | {float(s) / p:.3f} |"
                for i, (s, p, _) in enumerate(rounds, 1)
            ),  # fmt: skip
            "",
            f"Clock: {clock_verdict} (median ratio {statistics.median(ratios):.3f}, target "
            f"{CLOCK_TARGET[0]}-{CLOCK_TARGET[1]}).",
            "",
            "| dtype | suite FLOP/cycle (ISA flags) | probe FLOP/cycle | probe's instruction "
            "| ratio suite/probe |",
            "|---|---:|---:|---|---:|",
            *(
                f"| {d} | {m:.0f} | {'not built' if t is None else f'{t:.1f}'} | {w} | "
                f"{'-' if r is None else f'{r:.3f}'} |"
                for d, m, t, w, r in width_rows
            ),  # fmt: skip
            *([f"| fp32 | | {p256:.1f} | 256-bit FMA (shown) | |"] if p512 is not None else []),
            "",
            f"FLOP/cycle: {width_verdict}.",
            "",
            f"Peak with the measured clock: {est.tflops['fp32']:.3f} TFLOP/s fp32, "
            f"{est.tflops['bf16']:.3f} bf16 ({est.source}).",
            f"Peak with the reported clock: {reported.tflops.get('fp32', 0):.3f} TFLOP/s fp32, "
            f"{reported.tflops.get('bf16', 0):.3f} bf16 ({reported.source}).",
            "",
            "The probe's raw lines (one per process, all rounds):",
            "",
            "```",
            *(" ".join(f"{k}={v}" for k, v in r.items()) for r in all_rows),
            "```",
        ]
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text("\n".join(lines) + "\n")
        print(f"wrote {args.markdown}")
    return 0 if (clock_ok and width_ok) or args.smoke else 1


if __name__ == "__main__":
    raise SystemExit(main())
