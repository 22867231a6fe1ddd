"""Where the output lies relative to the input moves a memory-bound operator's time: PyTorch's
exact GELU on the quick size (1024x1024 fp32, 4 MiB each way) written into an output placed at
a chosen byte offset (modulo 4 KiB) from its input, both in one buffer, so the placement is
the only thing that changes. An allocator decides this offset for every tensor a suite or a
bare loop makes, so two loops on separately made tensors can differ by it (issue 31).

    python benchmarks/overhead_placement.py [--rounds 5]

Rounds interleave the offsets; each figure is the median over rounds of 40 calls' mean, and
the ratio is against the offset of 2 KiB. The output is checked against PyTorch's own GELU on
the same input (bit-identical: the same kernel) at every offset.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

N = 1024 * 1024
OFFSETS = [0, 16, 32, 48, 64, 128, 256, 512, 1024, 2048, 3072, 4032]  # bytes, (y - x) mod 4096


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args()

    buf = torch.empty(4 * N + 8192, dtype=torch.float32)
    base = (-buf.data_ptr() // 4) % 1024  # the element at which x starts 4 KiB-aligned
    x = buf[base : base + N]
    x.copy_(torch.randn(N, generator=torch.Generator().manual_seed(0)))
    want = torch.nn.functional.gelu(x, approximate="none")

    def output(offset: int) -> torch.Tensor:
        start = base + 2 * N + offset // 4
        return buf[start : start + N]

    def run(y: torch.Tensor, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            torch.ops.aten.gelu.out(x, approximate="none", out=y)
        return (time.perf_counter() - t0) / n

    got: dict[int, list[float]] = {o: [] for o in OFFSETS}
    for r in range(args.rounds):
        for o in OFFSETS if r % 2 == 0 else OFFSETS[::-1]:
            y = output(o)
            run(y, 5)
            got[o].append(run(y, args.calls))
            if not torch.equal(y, want):
                raise SystemExit(f"overhead_placement.py: wrong output at offset {o}")
    ref = statistics.median(got[2048])
    print(
        f"GELU 1024x1024 fp32, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{args.rounds} rounds of {args.calls} calls; output correct at every offset"
    )
    for o in OFFSETS:
        m = statistics.median(got[o])
        print(f"(y - x) mod 4096 = {o:4d} B: {m * 1e6:7.1f} us  {m / ref:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
