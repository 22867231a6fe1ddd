"""The suite's allreduce next to a bare ``torch.distributed.all_reduce`` loop timed by hand: same
ranks, same process, same message sizes and buffers, interleaved (suite, bare, bare, suite, ...)
so drift hits both alike. Target: suite busbw / bare busbw >= 0.95 for messages >= 1 MiB (small
messages are latency-bound: printed, not judged).

    python -m benchmarks.validation.allreduce_vs_bare [--world-size 2] [--sizes 8,1K,64K,1M,16M]
        [--device cpu|cuda] [--rounds 15] [--budget 0.5] [--markdown docs/studies/allreduce-cpu.md] [--strict]

The script starts its own ranks with torchrun (the suite's rendezvous and thread split: gloo on
the CPU, NCCL on GPUs) and re-enters itself on every rank. Each row also shows the suite's value
check of the same run (wrong elements summed over ranks, against the framework-free expected
result). busbw is nccl-tests' algbw x 2(n-1)/n; per round the worst rank counts (as the suite's
merged record does), then the median over rounds; the ratio is the median over rounds of the
ratio within each round (suite and bare ran back to back, so drift cancels).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.validation import SMOKE_HELP
from suite.launchers.base import Launch, free_port
from suite.launchers.torchrun import Torchrun
from suite.levels.distributed import arithmetic as B

ROOT = Path(__file__).resolve().parents[2]

DEFAULT_SIZES = "8,1K,64K,1M,4M,16M,64M"
JUDGED_FROM = 1 << 20
TARGET = 0.95
RANK_FLAG = "--rank-process"
MAX_INNER = 64  # suite.levels.distributed.run caps a collective's sample at 64 calls


def parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    number = text[:-1] if scale > 1 else text
    try:
        value = int(float(number) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 1024, 64K, 16M)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be positive")
    return value


def parse_sizes(text: str) -> list[int]:
    return sorted({parse_size(t) for t in text.split(",") if t.strip()})


def human(n: int) -> str:
    return B.human_bytes(n)


def value_check(wrong: int) -> str:
    return "pass (0 wrong)" if wrong == 0 else f"FAIL ({wrong} wrong)"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--world-size", type=int, default=2, help="ranks (default 2)")
    ap.add_argument(
        "--sizes", type=parse_sizes, default=parse_sizes(DEFAULT_SIZES), help="message sizes"
    )
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda if seen")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    ap.add_argument("--budget", type=float, default=0.5, help="seconds per measurement (0.5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    ap.add_argument("--raw", type=Path, help="also write every rank's per-round times (JSON)")
    ap.add_argument(
        "--strict", action="store_true", help="exit 1 when a judged size misses the target"
    )
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    ap.add_argument(RANK_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.smoke:  # a small size and the smallest judged one, two short rounds
        args.sizes, args.rounds, args.budget = parse_sizes("8,1M"), 2, 0.05
    if args.world_size < 2:
        ap.error("--world-size: an allreduce needs at least 2 ranks")
    if args.rounds < 1 or args.budget <= 0:
        ap.error("--rounds and --budget must be positive")
    return args


# -- the host side: start the ranks -----------------------------------------------------------------
def launch(argv: list[str], args: argparse.Namespace) -> int:
    """torchrun this script on ``--world-size`` ranks (the rendered command is printed)."""
    spec = Launch(
        worker=[sys.executable, "-m", "placeholder"],
        python=sys.executable,
        world_size=args.world_size,
        master_port=free_port(),
    )
    torchrun = Torchrun()
    env = {**os.environ, **torchrun.environment(spec), "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    # the suite's torchrun command, with this script in place of ``-m suite.worker TASK``
    cmd = torchrun.command(spec)
    assert cmd[-2:] == ["-m", "placeholder"], cmd
    cmd = [*cmd[:-1], "benchmarks.validation.allreduce_vs_bare", *argv, RANK_FLAG]  # from ROOT
    print("$ " + shlex.join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, env=env, cwd=ROOT, check=False).returncode


# -- on every rank --------------------------------------------------------------------------------
def bare_allreduce(
    torch: Any, x: Any, pristine: Any, budget_s: float, min_samples: int = 10
) -> tuple[float, int, int]:
    """Median seconds per ``all_reduce(x)``, timed the way one would by hand: refill ``x``
    from ``pristine`` and a barrier (outside the clock), then k calls between two clock reads
    (CUDA events on a GPU). Every rank makes the same number of calls: k and the number of
    samples are agreed (max over ranks) outside the timing. As in the suite, k <= 64, so the
    in-place sums (world-fold per call) of values starting at 2^-60 never reach inf."""
    dist = torch.distributed
    cuda = x.device.type == "cuda"
    source = torch.from_numpy(pristine).to(device=x.device, dtype=x.dtype)

    def agree(v: int) -> int:
        t = torch.tensor([v], dtype=torch.int64, device=x.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def run(k: int) -> float:
        x.copy_(source)
        dist.barrier()
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(x.device)
            start.record()
            for _ in range(k):
                dist.all_reduce(x)
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 1e3
        t0 = time.perf_counter()
        for _ in range(k):
            dist.all_reduce(x)
        return time.perf_counter() - t0

    for _ in range(5):  # warm-up
        run(1)
    k = 1
    while agree(int(run(k) < 0.002 and k < MAX_INNER)):
        k *= 2
    samples: list[float] = []
    t_end = time.perf_counter() + budget_s
    while True:
        samples.append(run(k) / k)
        if agree(int(len(samples) >= min_samples and time.perf_counter() >= t_end)):
            break
    return statistics.median(samples), k, len(samples)


def on_rank(args: argparse.Namespace) -> int:
    import torch

    from suite.adapters.pytorch.adapter import PyTorchAdapter
    from suite.levels.distributed.run import measure_collective
    from suite.measure import MeasureConfig

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    adapter = PyTorchAdapter()
    info = adapter.setup(device)
    backend = adapter.dist_init("auto")
    dist = torch.distributed
    rank, world = dist.get_rank(), dist.get_world_size()
    # what execute() runs a collective with: 5 warm-up calls, at most 64 calls per sample
    cfg = MeasureConfig(
        warmup_iters=5, time_budget_s=args.budget, target_ci_rel=0.01, max_inner=MAX_INNER
    )
    factor = B.bus_factor("allreduce", world)
    mine: list[dict[str, Any]] = []
    for size in args.sizes:
        n = B.element_count("allreduce", size, world)
        seed = args.seed + size
        suite_t: list[float] = []
        bare_t: list[float] = []
        wrong = 0
        for r in range(args.rounds):
            for which in ("suite", "bare") if r % 2 == 0 else ("bare", "suite"):
                if which == "suite":
                    task = {"benchmark": "allreduce", "seed": args.seed}
                    rec = measure_collective(task, adapter, {"sizes": [size]}, "allreduce", world, cfg, adapter.agree_max)[0]  # fmt: skip
                    suite_t.append(next(m["median"] for m in rec.metrics if m["name"] == "time"))
                    wrong += int((rec.work or {})["wrong_elements"])
                else:
                    # the buffer the suite times: this rank's input x 2^-60, summed in place
                    pristine = B.rank_input("allreduce", n, rank, world, seed + 1) * 2.0**-60
                    x = adapter.from_numpy(pristine, "fp32")
                    bare_t.append(bare_allreduce(torch, x, pristine, args.budget)[0])
        mine.append({"size": size, "n": n, "suite": suite_t, "bare": bare_t, "wrong": wrong})
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, mine)
    adapter.dist_shutdown()
    if rank != 0:
        return 0
    if args.raw:
        args.raw.write_text(json.dumps({"sizes": args.sizes, "ranks": everyone}, indent=1))
    rows = []
    for i, size in enumerate(args.sizes):
        per_rank = [ranks[i] for ranks in everyone]
        nbytes = per_rank[0]["n"] * B.ITEMSIZE

        # per round the slowest rank (as the suite's merged record), then the median over
        # rounds; the ratio pairs the suite and the bare loop of the same round
        suite_rounds = [max(r) for r in zip(*(p["suite"] for p in per_rank), strict=True)]
        bare_rounds = [max(r) for r in zip(*(p["bare"] for p in per_rank), strict=True)]
        s, b = statistics.median(suite_rounds), statistics.median(bare_rounds)
        ratios = [bt / st for st, bt in zip(suite_rounds, bare_rounds, strict=True)]
        quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        rows.append({
            "size": size, "bytes": nbytes, "suite_s": s, "bare_s": b,
            "suite_busbw": nbytes * factor / s / 1e9, "bare_busbw": nbytes * factor / b / 1e9,
            "ratio": statistics.median(ratios), "spread": (quartiles[0], quartiles[2]),
            "best_ratio": min(bare_rounds) / min(suite_rounds),
            "judged": size >= JUDGED_FROM,
            "wrong": sum(p["wrong"] for p in per_rank),
        })  # fmt: skip
    return report(rows, args, info, backend, world, torch.__version__)


def report(
    rows: list[dict[str, Any]],
    args: argparse.Namespace,
    info: Any,
    backend: str,
    world: int,
    version: str,
) -> int:
    from rich.console import Console
    from rich.table import Table

    title = (
        f"suite allreduce vs bare torch.distributed.all_reduce — {world} ranks, {backend} on "
        f"{info.name} ({info.kind}), torch {version}, {args.rounds} interleaved rounds, "
        f"busbw = algbw x 2(n-1)/n, worst rank per round, median over rounds"
    )
    table = Table(title=title)
    for col in ("size", "suite time", "bare time", "suite busbw", "bare busbw", "ratio",
                "ratio p25-p75", "best-round ratio", "value check"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("size", "value check") else "right")
    judged = [r for r in rows if r["judged"]]
    for r in rows:
        ok = r["ratio"] >= TARGET
        ratio = f"{r['ratio']:.3f}"
        ratio = f"[{'green' if ok else 'red'}]{ratio}[/]" if r["judged"] else f"[dim]{ratio}[/]"
        table.add_row(
            human(r["size"]),
            f"{r['suite_s'] * 1e6:.1f} µs",
            f"{r['bare_s'] * 1e6:.1f} µs",
            f"{r['suite_busbw']:.4f} GB/s",
            f"{r['bare_busbw']:.4f} GB/s",
            ratio,
            f"{r['spread'][0]:.2f}-{r['spread'][1]:.2f}",
            f"{r['best_ratio']:.3f}",
            value_check(r["wrong"]),
        )
    Console(width=170).print(table)
    worst = min((r["ratio"] for r in judged), default=None)
    verdict = (
        f"worst ratio for sizes >= {human(JUDGED_FROM)}: {worst:.3f} (target >= {TARGET})"
        if worst is not None
        else f"no size >= {human(JUDGED_FROM)}: nothing judged"
    )
    print(verdict + "; smaller sizes are latency-bound and not judged")
    if args.smoke:
        print("smoke run (tiny sizes, 2 rounds): it ran end to end; the ratios mean nothing")
    if args.markdown:
        given = [a for a in sys.argv[1:] if a != RANK_FLAG]
        cmd = shlex.join(["python", "-m", "benchmarks.validation.allreduce_vs_bare", *given])
        lines = [
            f"# Suite allreduce vs a bare loop on {info.name}",
            "",
            f"{title}. Host: {platform.node()}, {time.strftime('%Y-%m-%d')}. Command: `{cmd}`.",
            "",
            "The ratio is suite busbw / bare busbw (1.0 = no overhead), the median over rounds of "
            "the ratio within a round (suite and bare ran back to back); the best-round ratio "
            "compares the fastest round of each (on a noisy machine, the intrinsic cost); p25-p75 "
            "is the spread of the per-round ratios, i.e. how much of a difference is noise. "
            "Judged (on the ratio): sizes "
            f">= {human(JUDGED_FROM)} (target >= {TARGET}); smaller messages are latency-bound "
            "and only shown. Value check: the suite's own check in the same run, wrong "
            "elements summed over ranks.",
            "",
            "| size | suite time (µs) | bare time (µs) | suite busbw (GB/s) | bare busbw (GB/s) | ratio | ratio p25-p75 | best-round ratio | judged | value check |",
            "|---|---:|---:|---:|---:|---:|---|---:|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {human(r['size'])} | {r['suite_s'] * 1e6:.1f} | {r['bare_s'] * 1e6:.1f} | "
                f"{r['suite_busbw']:.4f} | {r['bare_busbw']:.4f} | {r['ratio']:.3f} | "
                f"{r['spread'][0]:.2f}-{r['spread'][1]:.2f} | {r['best_ratio']:.3f} | "
                f"{'yes' if r['judged'] else 'no (latency-bound)'} | "
                f"{value_check(r['wrong'])} |"
            )
        lines += ["", verdict + "."]
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text("\n".join(lines) + "\n")
        print(f"wrote {args.markdown}")
    if any(r["wrong"] for r in rows):
        return 1
    if args.strict and worst is not None and worst < TARGET:
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = arguments(argv)
    if getattr(args, RANK_FLAG.lstrip("-").replace("-", "_")):
        return on_rank(args)
    return launch(argv, args)


if __name__ == "__main__":
    raise SystemExit(main())
