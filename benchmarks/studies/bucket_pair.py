"""DDP's bucket size measured paired: two copies of one network, one wrapped with each bucket
size, trained in alternating steps in the same two processes, so that whatever drifts on the
machine (other work, clocks, caches) falls on both alike.

    python -m benchmarks.studies.bucket_pair [--pairs 300] [--network mlp]
        [--arch features=512,hidden=512,layers=40,classes=10] [--batch 8]
        [--buckets 1MiB,25MiB] [--ranks 2] [--json FILE]

Separate runs of the data_parallel benchmark (one bucket size a run) differ from one run to the
next by more than a bucket's effect on a machine whose load moves; docs/guide/projection.md ("Small
buckets cost") gives both. Each rank builds the network from the suite's zoo and trains it
through the suite's PyTorch adapter (``build_network``, ``data_parallel_bucketed``,
``train_step``: the data_parallel benchmark's own calls) on gloo, ``OMP_NUM_THREADS=1`` a rank.
The steps alternate A B B A ...; a pair is the two steps next to each other. The figure is
the median of the pairs' ratios (B over A's step time) with a 95% bootstrap interval;
"decided" where the interval excludes 1.

Checked in the same run: every loss finite; after the timed steps each network's weights equal
across the ranks; and the two networks' weights equal each other bit for bit (with two ranks
the averaged gradient is the same sum whatever the buckets, so a difference is a wrong
exchange).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from suite import cpuinfo
from suite.launchers.base import free_port
from suite.params import parse_size

ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20


def _parse_arch(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in (p.split("=") for p in text.split(",") if p)}


def _machine() -> dict[str, Any]:
    return {
        "cpu": cpuinfo.model_name(),
        "amx": "amx_bf16" in cpuinfo.flags(),
        "logical_cpus": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg": list(os.getloadavg()),
    }


def paired_ratio(a: np.ndarray, b: np.ndarray, seed: int = 0) -> dict[str, float]:
    """The median of b/a over the pairs, with a 95% bootstrap interval of that median."""
    logs = np.log(b / a)
    rng = np.random.default_rng(seed)
    boots = np.median(rng.choice(logs, size=(4000, logs.size)), axis=1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"ratio": float(np.exp(np.median(logs))), "ci95": [float(np.exp(lo)), float(np.exp(hi))]}


def worker(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    from suite.adapters.base import NetworkOptions
    from suite.adapters.pytorch.adapter import PyTorchAdapter
    from suite.onnx import zoo

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    adapter = PyTorchAdapter()
    adapter.setup("cpu")
    net_def = zoo.get(args.network)
    arch = net_def.validate(_parse_arch(args.arch))
    spec, classes = net_def.input_spec(arch), net_def.num_classes(arch)
    model = net_def.build(arch, seed=0)
    buckets = [int(parse_size(b, "--buckets")) for b in args.buckets.split(",")]
    nets = []
    for bucket in buckets:
        net = adapter.build_network(model, "fp32", NetworkOptions(lr=args.lr, channels_last=False))
        adapter.data_parallel_bucketed(net, bucket)
        nets.append(net)
    rng = np.random.default_rng(1 + rank)
    x = adapter.from_numpy(
        rng.standard_normal((args.batch, *spec.shape)).astype(np.float32), "fp32"
    )
    y = adapter.labels_from_numpy(rng.integers(0, classes, args.batch))
    losses: list[list[float]] = [[], []]

    def step(i: int) -> float:
        t = time.perf_counter()
        loss = adapter.train_step(nets[i], x, y)
        took = time.perf_counter() - t  # a CPU tensor: the step has finished when it returns
        losses[i].append(float(loss))
        return took

    load_before = list(os.getloadavg())
    for _ in range(args.warmup):
        step(0)
        step(1)
    times: list[list[float]] = [[], []]
    for k in range(args.pairs):
        order = (0, 1) if k % 2 == 0 else (1, 0)  # A B, B A, ...
        for i in order:
            times[i].append(step(i))
    load_after = list(os.getloadavg())

    flat = [
        np.concatenate([p.ravel() for _, p in sorted(adapter.network_parameters(n).items())])
        for n in nets
    ]
    across = []
    for f in flat:
        t = torch.from_numpy(f.copy())
        gathered = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(gathered, t)
        across.append(float(max((g - gathered[0]).abs().max() for g in gathered)))
    between = float(np.max(np.abs(flat[0] - flat[1])))
    finite = all(np.isfinite(v).all() for v in losses)
    dist.barrier()
    if rank == 0:
        a, b = np.array(times[0]), np.array(times[1])
        stat = paired_ratio(a, b)
        checks = {
            "losses_finite": finite,
            "weights_equal_across_ranks_max_abs_diff": across,
            "weights_equal_between_buckets_max_abs_diff": between,
            "passed": bool(finite and max(across) == 0.0 and between == 0.0),
        }
        out = {
            "study": "bucket_pair",
            "network": args.network,
            "arch": arch,
            "per_rank_batch": args.batch,
            "ranks": world,
            "lr": args.lr,
            "bucket_bytes": buckets,
            "pairs": args.pairs,
            "warmup_pairs": args.warmup,
            "step_s": {"a": times[0], "b": times[1]},
            "median_step_s": [float(np.median(a)), float(np.median(b))],
            "b_over_a": stat,
            "decided": not (stat["ci95"][0] <= 1.0 <= stat["ci95"][1]),
            "correctness": checks,
            "loadavg_before": load_before,
            "loadavg_after": load_after,
            "torch": torch.__version__,
            "machine": _machine(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        }
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    dist.destroy_process_group()
    return 0


def report(path: Path) -> None:
    r = json.loads(path.read_text())
    a, b = r["bucket_bytes"]
    ma, mb = (1e3 * v for v in r["median_step_s"])
    s = r["b_over_a"]
    verdict = "decided" if r["decided"] else "undecided (the interval holds 1)"
    print(f"{r['network']} {r['arch']} per-rank batch {r['per_rank_batch']}, {r['ranks']} ranks, "
          f"{r['pairs']} pairs; load {r['loadavg_before'][0]:.2f} -> {r['loadavg_after'][0]:.2f}")  # fmt: skip
    print("| bucket | step ms (median) |\n|---|---|")
    print(f"| {a / MIB:g} MiB | {ma:.1f} |\n| {b / MIB:g} MiB | {mb:.1f} |")
    print(f"{b / MIB:g} MiB over {a / MIB:g} MiB, paired: {s['ratio']:.3f} "
          f"(95% CI {s['ci95'][0]:.3f}-{s['ci95'][1]:.3f}): {verdict}")  # fmt: skip
    c = r["correctness"]
    print(f"correctness: {'passed' if c['passed'] else 'FAILED'} (losses finite {c['losses_finite']}, "
          f"across ranks {max(c['weights_equal_across_ranks_max_abs_diff']):.3g}, "
          f"between buckets {c['weights_equal_between_buckets_max_abs_diff']:.3g})")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=10, help="pairs before the timed ones")
    ap.add_argument("--network", default="mlp")
    ap.add_argument("--arch", default="features=512,hidden=512,layers=40,classes=10")
    ap.add_argument("--batch", type=int, default=8, help="per rank")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--buckets", default="1MiB,25MiB", help="A,B")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--json", default="bucket_pair.json")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.ranks),
        "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
        "-m", "benchmarks.studies.bucket_pair", "--worker",
        "--pairs", str(args.pairs), "--warmup", str(args.warmup), "--network", args.network,
        "--arch", args.arch, "--batch", str(args.batch), "--lr", str(args.lr),
        "--buckets", args.buckets, "--json", str(Path(args.json).resolve()),
    ]  # fmt: skip
    subprocess.run(cmd, env=env, cwd=ROOT, check=True)
    report(Path(args.json))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
