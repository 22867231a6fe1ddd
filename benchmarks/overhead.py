"""Suite overhead: the suite's median for gemm and conv2d next to a bare PyTorch loop timing
the same op on the same inputs, in the same process, interleaved (suite, bare, suite, ...)
so clock and thermal drift hit both alike. Target: ratio suite/bare <= 1.02.

    python benchmarks/overhead.py [--device cpu|cuda] [--rounds 3] [--markdown docs/overhead-cpu.md]

Each row also shows the correctness check of the same run (the suite's, against float64).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suite.adapters.pytorch.adapter import PyTorchAdapter  # noqa: E402
from suite.dtypes import quantize  # noqa: E402
from suite.levels import (
    execute,  # noqa: E402
    load_benchmark,  # noqa: E402
)
from suite.measure import MeasureConfig  # noqa: E402

CPU_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("gemm", {"m": 256, "n": 256, "k": 256}, "fp32"),
    ("gemm", {"m": 1024, "n": 1024, "k": 1024}, "fp32"),
    ("gemm", {"m": 1024, "n": 1024, "k": 1024}, "bf16"),
    (
        "conv2d",
        {
            "batch": 4,
            "in_channels": 32,
            "height": 28,
            "width": 28,
            "out_channels": 32,
            "kernel": 3,
            "stride": 1,
            "padding": 1,
            "direction": "forward",
        },
        "fp32",
    ),
    (
        "conv2d",
        {
            "batch": 8,
            "in_channels": 128,
            "height": 28,
            "width": 28,
            "out_channels": 128,
            "kernel": 3,
            "stride": 1,
            "padding": 1,
            "direction": "forward",
        },
        "fp32",
    ),
    (
        "conv2d",
        {
            "batch": 4,
            "in_channels": 32,
            "height": 28,
            "width": 28,
            "out_channels": 32,
            "kernel": 3,
            "stride": 1,
            "padding": 1,
            "direction": "backward",
        },
        "fp32",
    ),
]
GPU_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("gemm", {"m": 4096, "n": 4096, "k": 4096}, "fp32"),
    ("gemm", {"m": 4096, "n": 3072, "k": 768}, "bf16"),
    ("gemm", {"m": 8192, "n": 8192, "k": 8192}, "bf16"),
    (
        "conv2d",
        {
            "batch": 32,
            "in_channels": 64,
            "height": 56,
            "width": 56,
            "out_channels": 64,
            "kernel": 3,
            "stride": 1,
            "padding": 1,
            "direction": "forward",
        },
        "fp32",
    ),
    (
        "conv2d",
        {
            "batch": 32,
            "in_channels": 256,
            "height": 14,
            "width": 14,
            "out_channels": 256,
            "kernel": 3,
            "stride": 1,
            "padding": 1,
            "direction": "forward",
        },
        "bf16",
    ),
    (
        "conv2d",
        {
            "batch": 32,
            "in_channels": 64,
            "height": 56,
            "width": 56,
            "out_channels": 64,
            "kernel": 3,
            "stride": 1,
            "padding": 1,
            "direction": "backward",
        },
        "bf16",
    ),
]


def bare_loop(
    name: str, params: dict[str, Any], dtype: str, device: torch.device, seconds: float, seed: int
) -> float:
    """Median seconds per call of the plain PyTorch op, timed the way one would by hand."""
    bench = load_benchmark("operator", name)
    p = bench.validate(params)
    x = {k: quantize(v, dtype) for k, v in bench.inputs(p, np.random.default_rng(seed)).items()}
    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    t = {k: torch.from_numpy(v).to(device=device, dtype=tdt) for k, v in x.items()}
    F = torch.nn.functional
    if name == "gemm":
        a, b = t["a"], t["b"]

        def op() -> Any:
            return torch.matmul(a, b)
    elif p["direction"] == "forward":
        xx, w = t["x"], t["w"]

        def op() -> Any:
            return F.conv2d(xx, w, stride=p["stride"], padding=p["padding"])
    else:
        xx, w = t["x"].requires_grad_(True), t["w"].requires_grad_(True)
        y = F.conv2d(xx, w, stride=p["stride"], padding=p["padding"])
        dy = t["dy"]

        def op() -> Any:
            return torch.autograd.grad(y, (xx, w), dy, retain_graph=True)

    cuda = device.type == "cuda"

    def run(n: int) -> float:
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            s.record()
            for _ in range(n):
                op()
            e.record()
            e.synchronize()
            return s.elapsed_time(e) / 1e3
        t0 = time.perf_counter()
        for _ in range(n):
            op()
        return time.perf_counter() - t0

    for _ in range(3):
        run(1)
    n = 1
    while run(n) < 0.002:
        n *= 2
    samples = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end or len(samples) < 10:
        samples.append(run(n) / n)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=2.0, help="seconds per measurement")
    ap.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    args = ap.parse_args()

    adapter = PyTorchAdapter()
    info = adapter.setup(args.device)
    cases = GPU_CASES if info.kind == "gpu" else CPU_CASES
    cfg = MeasureConfig(time_budget_s=args.budget, target_ci_rel=0.01, min_samples=10).to_dict()
    rows = []
    for name, params, dtype in cases:
        bench = load_benchmark("operator", name)
        suite_medians, bare_medians, checks = [], [], None
        for _ in range(args.rounds):
            out = execute(
                {"benchmark": name, "params": params, "dtype": dtype, "seed": 0, "measure": cfg},
                adapter,
                info,
            )
            suite_medians.append(out["metrics"][0]["median"])
            checks = out["correctness"]
            bare_medians.append(bare_loop(name, params, dtype, adapter.device, args.budget, seed=0))
        s, b = statistics.median(suite_medians), statistics.median(bare_medians)
        worst = max(checks["checks"], key=lambda c: (c["error"] or float("inf")) / c["tolerance"])
        rows.append(
            {
                "benchmark": name,
                "params": bench.label(bench.validate(params)),
                "dtype": dtype,
                "suite_ms": s * 1e3,
                "bare_ms": b * 1e3,
                "ratio": s / b,
                "tflops": bench.flops(bench.validate(params)) / s / 1e12,
                "correct": f"{'pass' if checks['passed'] else 'FAIL'} {worst['error']:.1e}",
            }
        )

    title = (
        f"suite vs bare PyTorch loop — {info.name} ({info.kind}), torch {torch.__version__}, "
        f"{args.rounds} interleaved rounds, median of round medians"
    )
    table = Table(title=title)
    for col in (
        "benchmark",
        "params",
        "dtype",
        "suite median",
        "bare median",
        "ratio",
        "TFLOP/s",
        "correctness",
    ):
        table.add_column(col)
    for r in rows:
        ok = r["ratio"] <= 1.02
        table.add_row(
            r["benchmark"],
            r["params"],
            r["dtype"],
            f"{r['suite_ms']:.4f} ms",
            f"{r['bare_ms']:.4f} ms",
            f"[{'green' if ok else 'red'}]{r['ratio']:.3f}[/]",
            f"{r['tflops']:.3f}",
            r["correct"],
        )
    Console(width=160).print(table)
    worst_ratio = max(r["ratio"] for r in rows)
    print(f"worst ratio {worst_ratio:.3f} (target <= 1.02)")
    if args.markdown:
        lines = [
            f"# Suite overhead on {info.name}",
            "",
            f"{title}. Host: {platform.node()}, "
            f"{time.strftime('%Y-%m-%d')}. Command: `python benchmarks/overhead.py --device {args.device}`.",
            "",
            "| benchmark | params | dtype | suite median (ms) | bare median (ms) | ratio | TFLOP/s | correctness (worst rel. error) |",
            "|---|---|---|---:|---:|---:|---:|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['benchmark']} | {r['params']} | {r['dtype']} | {r['suite_ms']:.4f} | {r['bare_ms']:.4f} | "
                f"{r['ratio']:.3f} | {r['tflops']:.3f} | {r['correct']} |"
            )
        lines += ["", f"Worst ratio: {worst_ratio:.3f} (target ≤ 1.02)."]
        args.markdown.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
