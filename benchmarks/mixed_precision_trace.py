"""Trace one quick zoo network's training step by step (PyTorch): where the first non-finite
value appears and what grows before it. The instrument behind docs/mixed-precision-stability.md.

    python benchmarks/mixed_precision_trace.py [--network resnet101] [--dtype fp16] [--seed 0]
        [--steps 40] [--threads 1] [--residual-gain G] [--lr LR] [--batch B] [--resolution R]

The network is the PyTorch adapter's, built from the zoo's ONNX graph, trained as the level's
``train`` task trains it (the same batch every step, SGD momentum 0.9, autocast and
``GradScaler`` for fp16). Per step, one JSON line: the loss, the loss scale before the step and
whether the update was skipped, the gradients' global norm and largest element (unscaled), the
weights' norm, the largest |value| of any convolution and batch-norm output, the largest
running variance, the inference-mode loss on the training batch after the step, and the first
node whose output (forward) or output gradient (backward, as scaled) was not finite. Nothing
here is timed: the hooks synchronise.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--network", default="resnet101")
    ap.add_argument("--dtype", default="fp16", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--residual-gain", type=float, help="override zoo.RESIDUAL_BN_GAIN")
    ap.add_argument("--lr", type=float)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--resolution", type=int)
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    import suite.adapters.pytorch.network as PN
    from suite.adapters.base import NetworkOptions
    from suite.adapters.pytorch.adapter import PyTorchAdapter
    from suite.levels import load_benchmark
    from suite.levels.network import workload as B
    from suite.onnx import zoo

    torch.set_num_threads(args.threads)
    if args.residual_gain is not None:
        zoo.RESIDUAL_BN_GAIN = args.residual_gain
    bench = load_benchmark("network", "train")
    size = next(s.params for s in bench.sizes("quick") if s.params["network"] == args.network)
    overrides = {"lr": args.lr, "batch": args.batch, "resolution": args.resolution}
    params = bench.validate({**size, **{k: v for k, v in overrides.items() if v is not None}})
    w = bench.workload(params, seed=args.seed)
    adapter = PyTorchAdapter()
    adapter.setup("cpu")
    amp = args.dtype != "fp32"
    options = NetworkOptions(lr=params["lr"], amp=amp, seed=args.seed)
    net = adapter.build_network(w.model, args.dtype, options)
    x, y = B.synthetic_batch(w.input, params["batch"], w.classes, np.random.default_rng(args.seed))
    xt = adapter.labels_from_numpy(x) if w.input.kind == "int64" else adapter.from_numpy(x, "fp32")
    yt = adapter.labels_from_numpy(y)

    seen: dict[str, Any] = {}

    def record(name: str, kind: str, out: torch.Tensor) -> None:
        peak = float(out.detach().abs().max().float())
        key = f"{kind}_max"
        seen[key] = max(seen.get(key, 0.0), peak) if math.isfinite(peak) else math.inf
        if not math.isfinite(peak) and "first_nonfinite_forward" not in seen:
            seen["first_nonfinite_forward"] = name

    def grad_hook(name: str) -> Any:
        def hook(g: torch.Tensor) -> None:
            # backward runs from the loss to the input: the first hook to see a non-finite
            # gradient names the node nearest the loss
            if "first_nonfinite_backward" not in seen and not bool(torch.isfinite(g).all()):
                seen["first_nonfinite_backward"] = name

        return hook

    def traced(fn: Any, kind: str | None) -> Any:
        def op(m: Any, node: Any, a: Any, values: Any) -> Any:
            out = fn(m, node, a, values)
            if m.training and isinstance(out, torch.Tensor) and out.is_floating_point():
                if kind is not None:
                    record(node.name, kind, out)
                elif not bool(torch.isfinite(out).all()) and "first_nonfinite_forward" not in seen:
                    seen["first_nonfinite_forward"] = node.name
                if out.requires_grad:
                    out.register_hook(grad_hook(node.name))
            return out

        return op

    kinds = {"Conv": "conv", "BatchNormalization": "batchnorm"}
    for op_type, fn in list(PN._OPS.items()):
        PN._OPS[op_type] = traced(fn, kinds.get(op_type))

    module = net.module
    params_list = list(module.parameters())

    def norm(ts: list[torch.Tensor]) -> float:
        return math.sqrt(sum(float((t.detach().double() ** 2).sum()) for t in ts))

    print(json.dumps({"params": params, "dtype": args.dtype, "seed": args.seed,
                      "residual_gain": zoo.RESIDUAL_BN_GAIN, "threads": torch.get_num_threads(),
                      "weight_norm": norm(params_list)}))  # fmt: skip
    for step in range(args.steps):
        seen.clear()
        scale = adapter.loss_scale(net)
        loss = float(adapter.train_step(net, xt, yt))
        after = adapter.loss_scale(net)
        # GradScaler.step unscales the gradients in place before it steps (or skips)
        grads = [p.grad for p in params_list if p.grad is not None]
        grad_max = max(float(g.abs().max()) for g in grads)
        running_var = max(
            float(b.max()) for k, b in module.named_buffers() if k.endswith("running_var")
        ) if any(k.endswith("running_var") for k, _ in module.named_buffers()) else None  # fmt: skip
        logits = adapter.forward(net, xt).float()
        inference_loss = float(torch.nn.functional.cross_entropy(logits, yt))
        print(json.dumps({
            "step": step, "loss": loss, "loss_scale": scale,
            "skipped": scale is not None and after is not None and after < scale,
            "grad_norm": norm(grads), "grad_max": grad_max, "weight_norm": norm(params_list),
            "conv_max": seen.get("conv_max"), "batchnorm_max": seen.get("batchnorm_max"),
            "running_var_max": running_var, "inference_loss": inference_loss,
            "first_nonfinite_forward": seen.get("first_nonfinite_forward"),
            "first_nonfinite_backward": seen.get("first_nonfinite_backward"),
        }), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
