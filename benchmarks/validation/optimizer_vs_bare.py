"""The suite's PyTorch fused AdamW record against a bare loop, in the same process, interleaved.

Each round runs the training level's ``optimizer`` benchmark exactly as the worker does
(``suite.levels.execute``: parameters and gradients from the suite's generators, the
correctness steps, then the suite's measure loop around ``PyTorchAdapter.time``) for
``torch.optim.AdamW(fused=True)``, then a bare loop: the same parameter values and gradients
in plain ``nn.Parameter`` tensors, ``torch.optim.AdamW(..., fused=True)``, a warm-up, and
``time.perf_counter`` around as many ``step()`` calls per sample as the suite's samples held.
The rounds alternate (and so does which side goes first: the bare loop takes the previous
suite round's calls per sample and sample count), so a change of the machine's load reaches
both sides; the ratio is the median of the suite's medians over the median of the bare loop's,
and the target is met when it is within and so are at least half the rounds' own ratios
(``benchmarks.validation.judge``).

Target: 0.97 <= suite / bare <= 1.03 (two-sided: a suite faster than the bare loop would be
measuring something else).

    .venv/bin/python -m benchmarks.validation.optimizer_vs_bare [--params zoo:resnet50:full] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np

from benchmarks.validation import SMOKE_HELP, judge
from suite.adapters import ADAPTERS
from suite.dtypes import quantize
from suite.levels import execute
from suite.optimizers import catalogue
from suite.optimizers.gradients import gradients, parameter_set

TARGET = (0.97, 1.03)


def suite_round(adapter: Any, device: Any, params: str, measure: dict[str, Any]) -> dict[str, Any]:
    task = {
        "level": "training",
        "benchmark": "optimizer",
        "dtype": "fp32",
        "seed": 0,
        "measure": measure,
        "params": {"optimizer": "adamw", "implementation": "fused", "params": params, "steps": 1},
    }
    (rec,) = execute(task, adapter, device)
    time_metric = next(m for m in rec["metrics"] if m["name"] == "time")
    return {
        "median": time_metric["median"],
        "inner": rec["measurement"]["inner_repeats"],
        "samples": rec["measurement"]["samples"],
        "passed": rec["correctness"]["passed"],
        "checks": rec["correctness"]["checks"],
    }


def bare_round(
    torch: Any, params: str, inner: int, samples: int, warmup: int = 3, device: str = "cpu"
) -> dict[str, Any]:
    hyper = catalogue.get("adamw").complete({})
    ps = parameter_set(params, seed=0)
    g1 = gradients(ps.shapes, 1, 0)
    tensors = [
        torch.nn.Parameter(
            torch.from_numpy(np.asarray(quantize(p, "fp32"), dtype=np.float32)).to(device)
        )
        for p in ps.params.values()
    ]
    for t, name in zip(tensors, ps.params, strict=True):
        t.grad = torch.from_numpy(np.asarray(quantize(g1[name], "fp32"), dtype=np.float32)).to(
            device
        )
    opt = torch.optim.AdamW(
        tensors,
        lr=hyper["lr"],
        betas=(hyper["beta1"], hyper["beta2"]),
        eps=hyper["eps"],
        weight_decay=hyper["weight_decay"],
        fused=True,
    )
    for _ in range(warmup):
        opt.step()
    times = []
    cuda = device != "cpu"
    for _ in range(samples):
        if cuda:  # device time between two events, as the suite's adapter measures it
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(inner):
                opt.step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / inner)
            continue
        t0 = time.perf_counter()
        for _ in range(inner):
            opt.step()
        times.append((time.perf_counter() - t0) / inner)
    return {"median": statistics.median(times), "inner": inner, "samples": samples}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="zoo:resnet50:full")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget", type=float, default=5.0, help="the suite's time budget (s)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    if args.smoke:  # gpu-check's CPU rehearsal's 200,000 parameters, two short rounds
        args.params, args.rounds, args.budget = "flat:200000", 2, 0.2
    import torch

    adapter = ADAPTERS.load("pytorch")()
    device = adapter.setup(args.device)
    measure = {"time_budget_s": args.budget}
    print(
        f"torch {torch.__version__}, {device.name}, {torch.get_num_threads()} threads, "
        f"params {args.params}, "
        f"{args.rounds} rounds; load average before: {os.getloadavg()}",
        flush=True,
    )
    rows = []
    inner, samples = 0, 0
    for i in range(args.rounds):
        # the order alternates (suite first, then bare first), so a trend in the machine's
        # state (clocks, temperature, other load) does not favour one side
        if i % 2 and inner:
            b = bare_round(torch, args.params, inner, samples, device=str(adapter.device))
            s = suite_round(adapter, device, args.params, measure)
        else:
            s = suite_round(adapter, device, args.params, measure)
            b = bare_round(torch, args.params, s["inner"], s["samples"], device=str(adapter.device))
        inner, samples = s["inner"], s["samples"]
        rows.append((s, b))
        print(
            f"round {i + 1}: suite {s['median'] * 1e3:8.2f} ms ({s['samples']} samples x "
            f"{s['inner']}, checks {'pass' if s['passed'] else 'FAIL'})   bare "
            f"{b['median'] * 1e3:8.2f} ms   ratio {s['median'] / b['median']:.3f}   load "
            f"{os.getloadavg()[0]:.1f}",
            flush=True,
        )
    suite_median = statistics.median(s["median"] for s, _ in rows)
    bare_median = statistics.median(b["median"] for _, b in rows)
    ratio = suite_median / bare_median
    ratios = [s["median"] / b["median"] for s, b in rows]
    met, verdict = judge(ratios, *TARGET, headline=ratio)
    print()
    print("| side | median step (ms) | rounds |")
    print("| --- | --- | --- |")
    print(f"| suite (fused AdamW record) | {suite_median * 1e3:.2f} | {len(rows)} |")
    print(f"| bare torch.optim.AdamW(fused=True) | {bare_median * 1e3:.2f} | {len(rows)} |")
    print()
    print(
        f"suite / bare = {ratio:.3f} (per round: {', '.join(f'{r:.3f}' for r in ratios)}); "
        f"target {TARGET[0]} <= ratio <= {TARGET[1]}: {verdict}; load average after: "
        f"{os.getloadavg()}"
    )
    if not all(s["passed"] for s, _ in rows):
        return 1  # a wrong suite result is a failure whatever the ratio
    if args.smoke:
        print("smoke run (tiny sizes, 2 rounds): it ran end to end; the verdict means nothing")
        return 0
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
