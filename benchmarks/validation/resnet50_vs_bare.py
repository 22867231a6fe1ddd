"""ResNet-50 training throughput: the suite (ONNX zoo graph -> PyTorch builder, timed by the
suite's measurement loop) next to a bare PyTorch training loop that does not go through the
suite (torchvision's resnet50 where torchvision imports, otherwise the plain nn.Module
ResNet-50 written out below), same batch, precision and channels_last, in one process,
interleaved rounds. Target ratio suite/bare >= 0.97.

    python -m benchmarks.validation.resnet50_vs_bare [--device cuda] [--batch 256] [--dtype bf16] [--compile]

CPU defaults use a small resolution so a run takes a couple of minutes on 2 cores; the GPU
defaults are the real thing (224x224, batch 256, bf16).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table
from torch import nn

from benchmarks.validation import SMOKE_HELP
from suite.adapters.pytorch.adapter import PyTorchAdapter
from suite.levels import execute
from suite.measure import MeasureConfig


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.down is None else self.down(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + idt)


class ResNet50(nn.Module):
    """torchvision's ResNet-50 (v1.5) written out, for machines where torchvision is absent."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        layers, cin = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def bare_model(classes: int) -> tuple[nn.Module, str]:
    try:
        import torchvision

        return torchvision.models.resnet50(
            num_classes=classes
        ), f"torchvision {torchvision.__version__} resnet50"
    except Exception:  # noqa: BLE001 - torchvision missing or incompatible with this torch
        return ResNet50(classes), "plain nn.Module ResNet-50 (torchvision does not import here)"


def bare_throughput(
    args: argparse.Namespace, device: torch.device, seconds: float
) -> tuple[float, float, str]:
    model, what = bare_model(args.classes)
    model = model.to(device).to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.dtype)
    scaler = torch.amp.GradScaler(device.type) if amp is torch.float16 else None
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, 3, args.resolution, args.resolution, generator=g).to(device)
    x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, args.classes, (args.batch,), generator=g).to(device)
    step_fn = torch.compile(model) if args.compile else model
    losses = []

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            out = step_fn(x)
        loss = F.cross_entropy(out.float(), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        losses.append(loss.detach())

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    model.train()
    for _ in range(args.warmup):
        step()
    sync()
    samples = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end or len(samples) < 5:
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        samples.append(time.perf_counter() - t0)
    first, last = float(losses[0]), float(losses[-1])
    return args.batch / statistics.median(samples), last / first, what


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--resolution", type=int)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--dtype", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--budget", type=float, default=None, help="seconds of timed steps per measurement"
    )
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    gpu = args.device == "cuda"
    if args.smoke:  # 32 px, batch 4 (gpu-check's CPU rehearsal's size), one short round
        args.batch, args.resolution, args.classes = 4, 32, 10
        args.rounds, args.warmup, args.budget = 1, 1, 0.3
    args.batch = args.batch or (256 if gpu else 8)
    args.resolution = args.resolution or (224 if gpu else 64)
    args.dtype = args.dtype or ("bf16" if gpu else "fp32")
    args.budget = args.budget or (10.0 if gpu else 20.0)

    adapter = PyTorchAdapter()
    info = adapter.setup(args.device)
    device = adapter.device
    params = {
        "network": "resnet50",
        "batch": args.batch,
        "resolution": args.resolution,
        "classes": args.classes,
        "width": 1,
        "channels_last": True,
        "compile": args.compile,
    }
    measure = MeasureConfig(
        warmup_iters=args.warmup, min_samples=5, time_budget_s=args.budget, target_ci_rel=0.02
    ).to_dict()
    suite_tp, bare_tp, checks, bare_loss, what = [], [], None, 1.0, ""
    for _ in range(args.rounds):
        out = execute(
            {
                "benchmark": "train",
                "params": params,
                "dtype": args.dtype,
                "seed": 0,
                "measure": measure,
            },
            adapter,
            info,
        )
        assert isinstance(out, dict), "the train benchmark gives one record"
        suite_tp.append(next(m for m in out["metrics"] if m["name"] == "throughput")["median"])
        checks = out["correctness"]
        tp, bare_loss, what = bare_throughput(args, device, args.budget)
        bare_tp.append(tp)
    s, b = statistics.median(suite_tp), statistics.median(bare_tp)
    assert checks is not None
    failed = [c["name"] for c in checks["checks"] if not c["passed"]]
    title = (
        f"ResNet-50 training, {info.name}, {args.dtype}{' compiled' if args.compile else ' eager'}, "
        f"batch {args.batch}, {args.resolution}x{args.resolution}, channels_last, torch {torch.__version__}"
    )
    t = Table(title=title)
    for col in ("", "img/s (median of rounds)", "rounds", "correctness"):
        t.add_column(col)
    t.add_row(
        "suite (ONNX zoo -> PyTorch)",
        f"{s:.1f}",
        ", ".join(f"{v:.1f}" for v in suite_tp),
        "pass (onnxruntime logits, loss falls)" if not failed else f"FAIL {failed}",
    )
    t.add_row(
        f"bare loop: {what}",
        f"{b:.1f}",
        ", ".join(f"{v:.1f}" for v in bare_tp),
        f"loss last/first {bare_loss:.3f}",
    )
    Console(width=160).print(t)
    print(f"ratio suite/bare = {s / b:.3f} (target >= 0.97)")
    if args.smoke:
        print("smoke run (tiny sizes, 1 round): it ran end to end; the ratio means nothing")
    if args.markdown:
        args.markdown.write_text(
            f"# ResNet-50 training: suite vs bare loop\n\n{title}.\n\n"
            "| | img/s | rounds | correctness |\n|---|---:|---|---|\n"
            f"| suite (ONNX zoo → PyTorch) | {s:.1f} | {', '.join(f'{v:.1f}' for v in suite_tp)} | "
            f"{'pass' if not failed else 'FAIL'} |\n"
            f"| bare: {what} | {b:.1f} | {', '.join(f'{v:.1f}' for v in bare_tp)} | loss last/first {bare_loss:.3f} |\n\n"
            f"Ratio suite/bare: **{s / b:.3f}** (target ≥ 0.97). Command: `python -m benchmarks.validation.resnet50_vs_bare "
            f"--device {args.device} --batch {args.batch} --resolution {args.resolution} --dtype {args.dtype}"
            f"{' --compile' if args.compile else ''}`.\n"
        )
    return 0 if not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
