"""The in-process steps of `make gpu-check` (benchmarks/validation/gpu_check.py runs each in its own
process with its own time limit): same-run, interleaved suite/bare ratios.

    python -m benchmarks.validation.gpu_check_steps ratio-gemm --device cuda --out STEP.json

Each step writes one JSON document: its figures, the correctness checks of the same run, and
the target's verdict. Every side is timed the same way on the device (CUDA events around the
calls on a GPU, ``perf_counter`` after a synchronisation on the CPU), and the rounds alternate
which side goes first, so a drift of clocks or load reaches both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

#: suite / bare, both sides of the target (a suite faster than the bare loop measures
#: something else)
TARGET = (0.97, 1.03)

#: per device: the sizes of each ratio (the GPU's are the issue's; the CPU's are a rehearsal
#: that runs in seconds on 2 cores)
SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "cuda": {
        # each round runs the whole record (inputs rounded to bf16, the float64 reference and
        # its comparison: ~10 s of host work at 8192^3), hence 3 rounds
        "ratio-gemm": {"m": 8192, "n": 8192, "k": 8192, "dtype": "bf16", "rounds": 3,
                       "budget": 1.0},
        "ratio-resnet50": {"batch": 256, "resolution": 224, "dtype": "bf16", "rounds": 3,
                           "budget": 8.0},
        "ratio-adamw": {"params": "zoo:resnet50:full", "rounds": 5, "budget": 2.0},
    },
    "cpu": {
        "ratio-gemm": {"m": 256, "n": 256, "k": 256, "dtype": "fp32", "rounds": 3,
                       "budget": 0.3},
        # batch 2 at lr 0.01 blew batch norm's inference loss up (6.9 before, 8.8e6 after)
        "ratio-resnet50": {"batch": 4, "resolution": 32, "dtype": "fp32", "rounds": 1,
                           "budget": 0.5, "lr": 0.001},
        "ratio-adamw": {"params": "flat:200000", "rounds": 3, "budget": 0.3},
    },
}  # fmt: skip


#: where each round's figures so far are written (set by main: a step killed at its limit
#: leaves the rounds it finished, marked partial)
_PARTIAL: dict[str, Any] = {}


def _round_done(ratios: list[float], suite: list[float], bare: list[float], **extra: Any) -> None:
    path = _PARTIAL.get("path")
    if path is None:
        return
    doc = verdict(ratios, suite, bare) | extra | _PARTIAL["meta"]
    doc.update(partial=True, rounds_done=len(ratios))
    _write(Path(path), doc)


def _write(path: Path, doc: dict[str, Any]) -> None:
    """Whole or not at all: the step is killed at its limit (SIGTERM), maybe mid-write."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=float))
    tmp.replace(path)


def verdict(ratios: list[float], suite: list[float], bare: list[float]) -> dict[str, Any]:
    """The ratio of the medians of each side's per-round medians, the per-round ratios and
    their spread (the rounds' min-max), and whether the target holds for the ratio."""
    s, b = statistics.median(suite), statistics.median(bare)
    ratio = s / b
    return {
        "ratio": ratio,
        "per_round": ratios,
        "round_spread": [min(ratios), max(ratios)],
        "suite_median": s,
        "bare_median": b,
        "target": list(TARGET),
        "met": TARGET[0] <= ratio <= TARGET[1],
    }


def ratio_gemm(device: str, size: dict[str, Any]) -> dict[str, Any]:
    """The operator level's GEMM record (suite.levels.execute, as the worker runs it) against
    ``torch.matmul`` timed by hand on tensors of the same seeded values."""
    import torch

    from suite.adapters import ADAPTERS
    from suite.dtypes import quantize
    from suite.levels import execute, load_benchmark

    adapter = ADAPTERS.load("pytorch")()
    info = adapter.setup(device)
    p = {k: size[k] for k in ("m", "n", "k")}
    dtype = size["dtype"]
    task = {"level": "operator", "benchmark": "gemm", "params": p, "dtype": dtype, "seed": 0,
            "measure": {"time_budget_s": size["budget"]}}  # fmt: skip
    bench = load_benchmark("operator", "gemm")
    x = {k: quantize(v, dtype) for k, v in
         bench.inputs(bench.validate(p), np.random.default_rng(0)).items()}  # fmt: skip
    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a, b = (torch.from_numpy(x[k]).to(device=adapter.device, dtype=tdt) for k in ("a", "b"))
    cuda = adapter.device.type == "cuda"

    from benchmarks.validation.bare_torch_ops import bare_seconds

    def bare() -> float:
        call = lambda: torch.matmul(a, b)  # noqa: E731 - the bare loop, as one writes it
        for _ in range(3):
            call()
        n = 1
        while bare_seconds(call, n, cuda) < 0.002:
            n *= 2
        samples, t_end = [], time.perf_counter() + size["budget"]
        while time.perf_counter() < t_end or len(samples) < 10:
            samples.append(bare_seconds(call, n, cuda) / n)
        return statistics.median(samples)

    suite_t, bare_t, ratios, checks = [], [], [], None
    for i in range(size["rounds"]):
        order = ("suite", "bare") if i % 2 == 0 else ("bare", "suite")
        got: dict[str, float] = {}
        for side in order:
            if side == "suite":
                out = execute(task, adapter, info)
                rec = out[0] if isinstance(out, list) else out
                got["suite"] = next(m for m in rec["metrics"] if m["name"] == "time")["median"]
                checks = rec["correctness"]
            else:
                got["bare"] = bare()
        suite_t.append(got["suite"])
        bare_t.append(got["bare"])
        ratios.append(got["suite"] / got["bare"])
        _round_done(ratios, suite_t, bare_t, case=f"gemm {p['m']}x{p['n']}x{p['k']} {dtype}",
                    device=info.name, correctness=checks)  # fmt: skip
    flops = 2.0 * p["m"] * p["n"] * p["k"]
    out = verdict(ratios, suite_t, bare_t)
    out.update(case=f"gemm {p['m']}x{p['n']}x{p['k']} {dtype}", device=info.name,
               suite_tflops=flops / out["suite_median"] / 1e12,
               bare_tflops=flops / out["bare_median"] / 1e12, correctness=checks,
               bare="torch.matmul on tensors of the same seeded values, CUDA events "
               "(perf_counter on the CPU), calls per sample calibrated to >= 2 ms")  # fmt: skip
    return out


def ratio_resnet50(device: str, size: dict[str, Any]) -> dict[str, Any]:
    """The network level's ResNet-50 train record (ONNX zoo -> PyTorch, channels-last, eager)
    against a bare training loop (benchmarks/validation/resnet50_vs_bare.py's)."""
    from benchmarks.validation.resnet50_vs_bare import bare_throughput
    from suite.adapters import ADAPTERS
    from suite.levels import execute
    from suite.measure import MeasureConfig

    adapter = ADAPTERS.load("pytorch")()
    info = adapter.setup(device)
    args = argparse.Namespace(batch=size["batch"], resolution=size["resolution"], classes=1000,
                              dtype=size["dtype"], compile=False, warmup=3)  # fmt: skip
    params = {"network": "resnet50", "batch": size["batch"], "resolution": size["resolution"],
              "classes": 1000, "width": 1, "channels_last": True, "compile": False,
              **({"lr": size["lr"]} if "lr" in size else {})}  # fmt: skip
    measure = MeasureConfig(warmup_iters=3, min_samples=5, time_budget_s=size["budget"],
                            target_ci_rel=0.02).to_dict()  # fmt: skip
    task = {"benchmark": "train", "params": params, "dtype": size["dtype"], "seed": 0,
            "measure": measure}  # fmt: skip
    suite_tp, bare_tp, ratios, checks, what, loss_ratio = [], [], [], None, "", 1.0
    for i in range(size["rounds"]):
        order = ("suite", "bare") if i % 2 == 0 else ("bare", "suite")
        got: dict[str, float] = {}
        for side in order:
            if side == "suite":
                rec = execute(task, adapter, info)
                assert isinstance(rec, dict), "the train benchmark gives one record"
                got["suite"] = next(m for m in rec["metrics"] if m["name"] == "throughput")[
                    "median"
                ]
                checks = rec["correctness"]
            else:
                got["bare"], loss_ratio, what = bare_throughput(args, adapter.device,
                                                                size["budget"])  # fmt: skip
        suite_tp.append(got["suite"])
        bare_tp.append(got["bare"])
        ratios.append(got["suite"] / got["bare"])
        _round_done(ratios, suite_tp, bare_tp, device=info.name, correctness=checks,
                    case=f"ResNet-50 train {size['dtype']} batch {size['batch']}")  # fmt: skip
    # throughput: higher is better, so the ratio is suite/bare of the rates (>1: the suite
    # faster), reported the same way as the time ratios' inverse
    s, b = statistics.median(suite_tp), statistics.median(bare_tp)
    out = verdict(ratios, suite_tp, bare_tp)
    out.update(case=f"ResNet-50 train {size['dtype']} batch {size['batch']} "
               f"{size['resolution']}px channels-last eager", device=info.name,
               unit="images/s (higher is better: the ratio is suite rate / bare rate)",
               suite_images_per_s=s, bare_images_per_s=b, correctness=checks,
               bare=f"{what}, torch.autocast, SGD momentum, CUDA synchronised per step",
               bare_loss_last_over_first=loss_ratio)  # fmt: skip
    return out


def ratio_adamw(device: str, size: dict[str, Any]) -> dict[str, Any]:
    """The training level's fused AdamW record against torch.optim.AdamW(fused=True) on the
    same parameters and gradients (benchmarks/validation/optimizer_vs_bare.py's rounds)."""
    import torch

    from benchmarks.validation.optimizer_vs_bare import bare_round, suite_round
    from suite.adapters import ADAPTERS

    adapter = ADAPTERS.load("pytorch")()
    info = adapter.setup(device)
    measure = {"time_budget_s": size["budget"]}
    suite_t, bare_t, ratios, checks = [], [], [], None
    inner, samples = 0, 0
    for i in range(size["rounds"]):
        if i % 2 and inner:
            b = bare_round(torch, size["params"], inner, samples, device=str(adapter.device))
            s = suite_round(adapter, info, size["params"], measure)
        else:
            s = suite_round(adapter, info, size["params"], measure)
            b = bare_round(torch, size["params"], s["inner"], s["samples"],
                           device=str(adapter.device))  # fmt: skip
        inner, samples = s["inner"], s["samples"]
        checks = {"passed": s["passed"], "checks": s["checks"]}
        suite_t.append(s["median"])
        bare_t.append(b["median"])
        ratios.append(s["median"] / b["median"])
        _round_done(ratios, suite_t, bare_t, device=info.name, correctness=checks,
                    case=f"fused AdamW on {size['params']}")  # fmt: skip
    out = verdict(ratios, suite_t, bare_t)
    out.update(case=f"fused AdamW on {size['params']}", device=info.name, correctness=checks,
               bare="torch.optim.AdamW(fused=True) on the same parameter values and gradients, "
               "the suite's calls per sample and samples")  # fmt: skip
    return out


STEPS = {"ratio-gemm": ratio_gemm, "ratio-resnet50": ratio_resnet50, "ratio-adamw": ratio_adamw}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.validation.gpu_check_steps")
    ap.add_argument("step", choices=sorted(STEPS))
    ap.add_argument("--device", choices=("cuda", "cpu"), required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    size = SIZES[args.device][args.step]
    args.out.unlink(missing_ok=True)  # a rerun's figures, not an earlier attempt's
    _PARTIAL.update(path=args.out, meta={"step": args.step, "size": size,
                                         "device_kind": "gpu" if args.device == "cuda" else "cpu"})  # fmt: skip
    t0 = time.time()
    out = STEPS[args.step](args.device, size)
    out.update(step=args.step, size=size, elapsed_s=time.time() - t0,
               device_kind="gpu" if args.device == "cuda" else "cpu",
               loadavg_after=list(os.getloadavg()))  # fmt: skip
    _write(args.out, out)
    passed = bool((out.get("correctness") or {}).get("passed"))
    print(f"{args.step}: {out['case']}: suite/bare {out['ratio']:.3f} (rounds "
          f"{', '.join(f'{r:.3f}' for r in out['per_round'])}), target {TARGET[0]}-{TARGET[1]} "
          f"{'met' if out['met'] else 'NOT met'}; correctness {'pass' if passed else 'FAIL'}",
          flush=True)  # fmt: skip
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
