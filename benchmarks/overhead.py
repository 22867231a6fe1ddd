"""Suite overhead: the suite's median for every quick operator next to a bare PyTorch loop
timing the same op on the same input tensors (the very ones the suite timed), in the same
process, interleaved (suite, bare, suite, ...) so clock and thermal drift hit both alike.
Target: ratio suite/bare <= 1.02. A control column times the bare loop again on tensors of
its own: the spread where the allocator puts inputs and outputs makes by itself (a GELU's
time moves by up to 9% with its output's offset from its input, docs/overhead-cpu.md).

    python benchmarks/overhead.py [--device cpu|cuda] [--rounds 7] [--markdown docs/overhead-cpu.md]

On a CPU the cases are every quick operator task the plan makes (`dlsuite run --quick`: gemm,
conv2d forward and backward, softmax, gelu, attention, batch and layer norm) at fp32, and at
bf16 where the CPU has bf16 instructions, plus two large ones; on a GPU, the GPU cases below.
Each row also shows the correctness check of the same run (the suite's, against float64).
"""

from __future__ import annotations

import argparse
import os
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

from benchmarks.bare_torch_ops import bare_op  # noqa: E402 (scripts import it from here)
from suite.adapters.pytorch.adapter import PyTorchAdapter  # noqa: E402
from suite.dtypes import quantize  # noqa: E402
from suite.levels import (
    execute,  # noqa: E402
    load_benchmark,  # noqa: E402
)
from suite.measure import MeasureConfig  # noqa: E402

#: the large CPU cases, beside the quick ones (the small-operator bias is a small-size effect)
CPU_LARGE: list[tuple[str, dict[str, Any], str]] = [
    ("gemm", {"m": 1024, "n": 1024, "k": 1024}, "fp32"),
    ("gemm", {"m": 1024, "n": 1024, "k": 1024}, "bf16"),
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
]


def cpu_cases(bf16: bool) -> list[tuple[str, dict[str, Any], str]]:
    """Every quick operator task of the plan (fp32; bf16 too where the CPU runs it), then the
    large cases: the sizes `dlsuite run --quick` times, so the table covers what users see."""
    from suite.config import resolve
    from suite.plan import build

    dtypes = ["fp32", "bf16"] if bf16 else ["fp32"]
    cfg = resolve(
        {"level": ["operator"], "frameworks": ["pytorch"], "quick": True, "dtypes": dtypes},
        env={},
    )
    quick = [(t.benchmark, dict(t.params), t.dtype) for t in build(cfg)]
    return quick + [c for c in CPU_LARGE if bf16 or c[2] == "fp32"]


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


class CapturingAdapter(PyTorchAdapter):
    """The PyTorch adapter, keeping every tensor it makes from NumPy in ``created``: the
    suite's own input tensors, for the bare loop to time the op on the very same memory."""

    created: list[Any]

    def from_numpy(self, x: np.ndarray, dtype: str, *, requires_grad: bool = False) -> Any:
        t = super().from_numpy(x, dtype, requires_grad=requires_grad)
        self.created.append(t)
        return t


def suite_tensors(
    adapter: CapturingAdapter, name: str, params: dict[str, Any], dtype: str, seed: int
) -> dict[str, Any]:
    """The input tensors the last ``execute`` timed: the operator's run makes them first, in
    the order of its ``inputs`` (suite/levels/operator/base.py), before any other tensor.
    Checked against the inputs' values, so a change of that order fails here, loudly."""
    bench = load_benchmark("operator", name)
    p = bench.validate(params)
    x = {k: quantize(v, dtype) for k, v in bench.inputs(p, np.random.default_rng(seed)).items()}
    t = dict(zip(x, adapter.created[: len(x)], strict=True))
    for k, v in x.items():
        got = t[k].detach().to(device="cpu", dtype=torch.float64).numpy()
        if got.shape != v.shape or not np.array_equal(got, v):
            raise SystemExit(f"overhead.py: the suite's tensor {k!r} is not its input {k!r}")
    return t


def bare_loop(
    name: str,
    params: dict[str, Any],
    dtype: str,
    device: torch.device,
    seconds: float,
    seed: int,
    tensors: dict[str, Any] | None = None,
) -> float:
    """Median seconds per call of the plain PyTorch op, timed the way one would by hand, on
    ``tensors`` (the suite's own) or, without them, on tensors it makes itself."""
    bench = load_benchmark("operator", name)
    p = bench.validate(params)
    if tensors is None:
        rng = np.random.default_rng(seed)
        x = {k: quantize(v, dtype) for k, v in bench.inputs(p, rng).items()}
        tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
        tensors = {k: torch.from_numpy(v).to(device=device, dtype=tdt) for k, v in x.items()}
    op = bare_op(name, p, tensors)
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
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--budget", type=float, default=2.0, help="seconds per measurement")
    ap.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    args = ap.parse_args()

    load_start = os.getloadavg()[0]
    adapter = CapturingAdapter()
    info = adapter.setup(args.device)
    cases = GPU_CASES if info.kind == "gpu" else cpu_cases(adapter.supports("bf16")[0])
    cfg = MeasureConfig(time_budget_s=args.budget, target_ci_rel=0.01, min_samples=10).to_dict()
    rows = []
    for name, params, dtype in cases:
        bench = load_benchmark("operator", name)
        suite_medians, bare_medians, own_medians, checks = [], [], [], None
        for i in range(args.rounds):
            adapter.created = []
            out = execute(
                {"benchmark": name, "params": params, "dtype": dtype, "seed": 0, "measure": cfg},
                adapter,
                info,
            )
            suite_medians.append(out["metrics"][0]["median"])
            checks = out["correctness"]
            same = suite_tensors(adapter, name, params, dtype, seed=0)
            adapter.created = []
            # the bare loop on the suite's tensors, and on tensors of its own (the control:
            # where the allocator puts an input and the output moves a memory-bound op by
            # several per cent, docs/overhead-cpu.md); their order alternates between rounds
            for kind in ("same", "own") if i % 2 == 0 else ("own", "same"):
                got = bare_loop(
                    name, params, dtype, adapter.device, args.budget, 0,
                    same if kind == "same" else None,
                )  # fmt: skip
                (bare_medians if kind == "same" else own_medians).append(got)
            del same
        s, b = statistics.median(suite_medians), statistics.median(bare_medians)
        own = statistics.median(own_medians)
        worst = max(checks["checks"], key=lambda c: (c["error"] or float("inf")) / c["tolerance"])
        rows.append(
            {
                "benchmark": name,
                "params": bench.label(bench.validate(params)),
                "dtype": dtype,
                "suite_ms": s * 1e3,
                "bare_ms": b * 1e3,
                "ratio": s / b,
                "own_ratio": own / b,
                "tflops": bench.flops(bench.validate(params)) / s / 1e12,
                "correct": f"{'pass' if checks['passed'] else 'FAIL'} {worst['name']} "
                f"{worst['error']:.1e} (tol {worst['tolerance']:.0e})",
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
        "bare, own tensors",
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
            f"{r['own_ratio']:.3f}",
            f"{r['tflops']:.3f}",
            r["correct"],
        )
    Console(width=160).print(table)
    worst_ratio = max(r["ratio"] for r in rows)
    own = [r["own_ratio"] for r in rows]
    print(
        f"worst ratio {worst_ratio:.3f} (target <= 1.02); the bare loop on its own tensors "
        f"against the same on the suite's: {min(own):.3f} to {max(own):.3f}"
    )
    # A case over the target whose control moved as far: the reference disagreed with itself
    # (seen once: softmax fp32 1.268 with the control at 1.270, then 1.005 in the next run).
    # Its ratio stands as measured; the line says what it cannot tell apart.
    for r in rows:
        if r["ratio"] > 1.02 and abs(r["own_ratio"] - 1) > 0.02:
            print(
                f"  {r['benchmark']} {r['params']} {r['dtype']}: ratio {r['ratio']:.3f} with the "
                f"control at {r['own_ratio']:.3f}: the bare loop moved as much against itself; "
                "this run cannot tell the suite's cost from the reference's noise (rerun)"
            )
    if args.markdown:
        lines = [
            f"# Suite overhead on {info.name}",
            "",
            f"{title}. Host: {platform.node()}, {time.strftime('%Y-%m-%d')}, load average "
            f"{load_start:.1f} at the start and {os.getloadavg()[0]:.1f} at the end. Command: "
            f"`python benchmarks/overhead.py --device {args.device} --rounds {args.rounds}`.",
            "",
            "| benchmark | params | dtype | suite median (ms) | bare median (ms) | ratio | bare on its own tensors / bare | TFLOP/s | correctness (the check nearest its tolerance) |",
            "|---|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['benchmark']} | {r['params']} | {r['dtype']} | {r['suite_ms']:.4f} | {r['bare_ms']:.4f} | "
                f"{r['ratio']:.3f} | {r['own_ratio']:.3f} | {r['tflops']:.3f} | {r['correct']} |"
            )
        lines += [
            "",
            f"Worst ratio: {worst_ratio:.3f} (target ≤ 1.02). The bare loop on tensors "
            f"of its own against the same loop on the suite's: {min(own):.3f} to "
            f"{max(own):.3f}.",
        ]
        args.markdown.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
