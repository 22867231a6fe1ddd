"""Shared test helpers: run the real CLI in a subprocess, read records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: the unprivileged user (and group) the tests run a step as, where they run as root
NOBODY = 65534


def _nobody() -> Any:
    from suite import images

    return images.RunAs("nobody", NOBODY, NOBODY, "/")


def nobody_checkout() -> Path:
    """Where :data:`NOBODY` reads the suite from: this checkout where that user can reach it (CI's
    clones), else a copy of it under /var/tmp (a clone in a 0700 directory: ``mktemp -d`` makes
    them), as the Apptainer checks' user does (suite/images.py ``check_cwd``)."""
    from suite import images

    return images.check_cwd(_nobody())


def nobody_python() -> tuple[str, Path]:
    """An interpreter :data:`NOBODY` can run the suite's host side with, and the checkout to put
    on its path: this interpreter where that user can run it, else a virtual environment of the
    system's python3 with the suite's dependencies under /var/tmp (``check_interpreter``, made
    once), so that a step run as that user works from any clone."""
    from suite import images

    return images.check_interpreter(_nobody(), say=lambda s: None), nobody_checkout()


#: ``--config`` for the tests' whole-level runs: a 0.25 s time budget (see the file)
FAST_MEASURE = ROOT / "tests" / "fast-measure.toml"


def cli(
    *args: str, timeout: float = 600, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m suite ARGS`` with this interpreter, as a user would run ``dlsuite``."""
    # the checkout first, then whatever the caller's PYTHONPATH holds (an adapter package)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    full_env = {**os.environ, "PYTHONPATH": path, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "suite", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd or ROOT,
    )


def records(run_dir: Path) -> list[dict[str, Any]]:
    return records_at(run_dir / "results.jsonl")


def records_at(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def export_torch_model(path: Path) -> Any:
    """A small CNN (convolution, batch norm, pooling, a linear head; input ``image``, 3x16x16)
    exported by ``torch.onnx.export`` in inference mode with a dynamic batch: a user's file the
    suite did not write. Returns the module (torch imported here: tests with torch only)."""
    import torch

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 5),
    ).eval()
    torch.onnx.export(
        model,
        (torch.randn(2, 3, 16, 16),),
        str(path),
        dynamo=False,
        input_names=["image"],
        output_names=["out"],
        dynamic_axes={"image": {0: "N"}, "out": {0: "N"}},
    )
    return model


def export_torch_aux_head(path: Path) -> None:
    """A small CNN with an auxiliary head beside its logits (GoogLeNet's shape: batch norms, a
    dropout, two outputs), exported by ``torch.onnx.export`` in training mode
    (``TrainingMode.TRAINING``: batch norms and the dropout marked so) with a dynamic batch
    (torch imported here: tests with torch only)."""
    import torch
    from torch import nn

    class AuxHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
            self.body = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
            self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(16, 5))
            self.aux = nn.Sequential(nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4), nn.ReLU(),
                                     nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5))  # fmt: skip
            self.pool = nn.AdaptiveAvgPool2d(1)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = self.stem(x)
            return self.head(self.pool(self.body(h))), self.aux(h)

    torch.manual_seed(0)
    torch.onnx.export(
        AuxHead(),
        (torch.randn(2, 3, 16, 16),),
        str(path),
        dynamo=False,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        input_names=["image"],
        output_names=["logits", "aux"],
        dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}, "aux": {0: "N"}},
    )


def export_torch_encoder(path: Path) -> None:
    """A two-layer encoder of PyTorch's own ``nn.TransformerEncoder`` fed as a Hugging Face
    export is (``input_ids``, ``attention_mask``, ``token_type_ids``; batch and sequence
    dynamic), exported by ``torch.onnx.export`` at sequence 16: the legacy exporter bakes the
    traced sequence into the padding mask's reshape, so the file runs at sequence 16 with
    its mask bound at the batch it is fed (torch imported here: tests marked ``pytorch``)."""
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ids = torch.nn.Embedding(500, 32)
            self.types = torch.nn.Embedding(2, 32)
            layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = torch.nn.Linear(32, 3)

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            h = self.ids(input_ids) + self.types(token_type_ids)
            return self.head(self.encoder(h, src_key_padding_mask=attention_mask == 0)[:, 0])

    torch.manual_seed(0)
    ids = torch.randint(0, 500, (2, 16))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(
        Encoder().eval(),
        (ids, torch.ones_like(ids), torch.zeros_like(ids)),
        str(path),
        dynamo=False,
        input_names=names,
        output_names=["logits"],
        dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names}, "logits": {0: "batch"}},
    )
