"""The test corpus: real architectures from model libraries on PyPI, exported to ONNX by
``torch.onnx`` the way a user would, with random weights (nothing is downloaded).

Run in an interpreter with PyTorch, torchvision and transformers (the ``corpus`` extra):
``python -m tests.corpus [--only NAME,...] [DIR]`` writes every model (or the named ones) and
``manifest.json`` into DIR, or into a cache folder keyed by the hash of this file and the
library versions (printed on stdout), so a machine exports the corpus once. Framework environments without PyTorch (the conformance kit
in TensorFlow's, JAX's or MXNet's) read the folder (``corpus_dir``).

torchvision: its 0.28.0 wheel (the release for torch 2.13.0) does not import beside the CPU
torch wheel, because ``torchvision/__init__.py`` registers fake kernels for its compiled ops
(``torchvision::nms``), which did not load. The model definitions need none of them:
:func:`torchvision_models` makes the ``torchvision`` package object without running its
``__init__`` and imports ``torchvision.models`` from it.

Sizes are small (32 px images, reduced widths and depths through each library's own
configuration) so that every framework runs the whole corpus in minutes (``make corpus``); CI's
kits run :data:`CI_SUBSET`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLASSES = 10
IMAGE = (3, 32, 32)
SEQ = 16
VOCAB = 100


@dataclass(frozen=True)
class Entry:
    """One exported model of the corpus."""

    name: str  # unique: architecture + export variant
    architecture: str
    library: str
    #: "torchscript" (dynamo=False), "dynamo", or "torchscript-train" (dynamo=False,
    #: training=TrainingMode.TRAINING: batch norms and dropouts kept, in training mode)
    exporter: str
    opset: int
    batch: int | None  # the fixed batch of the export, None for a dynamic batch
    file: str
    input_kind: str  # "float" (images) or "int64" (token ids)
    input_shape: list[int]  # without the batch
    high: int  # token ids are drawn from [0, high)
    classes: int
    trainable: bool  # whether training in the corpus tests is expected to work


def torchvision_models() -> Any:
    """``torchvision.models`` without ``torchvision/__init__.py`` (see the module docstring)."""
    if "torchvision.models" in sys.modules:
        return sys.modules["torchvision.models"]
    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        raise ImportError("torchvision is not installed (pip install -e '.[corpus]')")
    if "torchvision" not in sys.modules:
        sys.modules["torchvision"] = importlib.util.module_from_spec(spec)
    import torchvision.models as tvm

    return tvm


def _hf_bert() -> Any:
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=SEQ, num_labels=CLASSES)  # fmt: skip
    return BertForSequenceClassification(cfg)


def _hf_distilbert() -> Any:
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    cfg = DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                           max_position_embeddings=SEQ, num_labels=CLASSES)  # fmt: skip
    return DistilBertForSequenceClassification(cfg)


class _LastToken:
    """A decoder's hidden state at the last position through a linear head: (batch, classes)."""

    @staticmethod
    def wrap(body: Any, width: int) -> Any:
        import torch

        class LastToken(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.body = body
                self.head = torch.nn.Linear(width, CLASSES)

            def forward(self, ids: torch.Tensor) -> torch.Tensor:
                hidden = self.body(input_ids=ids).last_hidden_state
                return self.head(hidden[:, -1])

        return LastToken()


def _hf_gpt2() -> Any:
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2)
    return _LastToken.wrap(GPT2Model(cfg), 32)


def _hf_t5_encoder_decoder() -> Any:
    """T5 (encoder and decoder, cross-attention) with the decoder fed the same ids."""
    import torch
    from transformers import T5Config, T5Model

    cfg = T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=1,
                   num_decoder_layers=1, num_heads=2, decoder_start_token_id=0)  # fmt: skip
    body = T5Model(cfg)

    class EncoderDecoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = body
            self.head = torch.nn.Linear(32, CLASSES)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            out = self.body(input_ids=ids, decoder_input_ids=ids).last_hidden_state
            return self.head(out.mean(dim=1))

    return EncoderDecoder()


def _tv(name: str, **kwargs: Any) -> Callable[[], Any]:
    return lambda: getattr(torchvision_models(), name)(num_classes=CLASSES, **kwargs)


def _tv_densenet() -> Any:
    from torchvision.models.densenet import DenseNet

    torchvision_models()
    return DenseNet(growth_rate=8, block_config=(2, 2, 2), num_init_features=16,
                    num_classes=CLASSES)  # fmt: skip


def _tv_convnext() -> Any:
    torchvision_models()
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    blocks = [CNBlockConfig(16, 32, 1), CNBlockConfig(32, 64, 1), CNBlockConfig(64, None, 1)]
    return ConvNeXt(blocks, stochastic_depth_prob=0.0, num_classes=CLASSES)


def _tv_vit() -> Any:
    torchvision_models()
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                             hidden_dim=32, mlp_dim=64, num_classes=CLASSES)  # fmt: skip


def _tv_swin() -> Any:
    torchvision_models()
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(patch_size=[2, 2], embed_dim=16, depths=[1, 1], num_heads=[1, 2],
                           window_size=[4, 4], stochastic_depth_prob=0.0,
                           num_classes=CLASSES)  # fmt: skip


def _tv_fcn_like_upsampler() -> Any:
    """A segmentation-style decoder head over a ResNet trunk (ConvTranspose, Resize, Pad)
    reduced to class logits: torchvision's own blocks, torch's own upsampling layers."""
    import torch
    from torch import nn

    tvm = torchvision_models()
    trunk = tvm.resnet18(num_classes=CLASSES)
    body = nn.Sequential(trunk.conv1, trunk.bn1, trunk.relu, trunk.maxpool, trunk.layer1)

    class Upsampler(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = body
            self.up = nn.ConvTranspose2d(64, 16, kernel_size=4, stride=2, padding=1)
            self.resize = nn.Upsample(scale_factor=2, mode="nearest")
            self.smooth = nn.Conv2d(16, 16, 3, padding=2, dilation=2)
            self.norm = nn.InstanceNorm2d(16, affine=True)
            self.pool = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True)
            self.head = nn.Linear(16, CLASSES)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.resize(torch.relu(self.up(self.body(x))))
            h = nn.functional.pad(h, (1, 0, 0, 1))
            h = self.pool(torch.relu(self.norm(self.smooth(h))))
            return self.head(h.mean(dim=(2, 3)))

    return Upsampler()


@dataclass(frozen=True)
class Recipe:
    architecture: str
    library: str
    build: Callable[[], Any]
    tokens: bool = False
    #: export variants: (exporter, opset, fixed batch or None)
    variants: tuple[tuple[str, int, int | None], ...] = (("torchscript", 17, None),)
    #: the image input (channels, height, width)
    image: tuple[int, int, int] = IMAGE


RECIPES: tuple[Recipe, ...] = (
    Recipe("resnet18", "torchvision", _tv("resnet18"), variants=(("torchscript", 13, None),)),
    Recipe("mobilenet_v2", "torchvision", _tv("mobilenet_v2", width_mult=0.35),
           variants=(("torchscript", 14, None),)),
    # in training mode the export keeps the 34 batch norms and the dropout an inference
    # export folds into the convolutions or drops: the network PyTorch trains
    Recipe("mobilenet_v3_small", "torchvision", _tv("mobilenet_v3_small", width_mult=0.5),
           variants=(("torchscript", 17, None), ("dynamo", 18, 2), ("torchscript-train", 17, None))),
    # 96 px: at 32 its last stages run at 1x1, where a fresh network's activations are heavy-
    # tailed (features' rms 4.8, max 75; one sample's logits spread 59): its loss starts ~117 at
    # batch 3 and no learning rate down to 1e-5 made it fall. At 96 px: rms 0.5, max 3.6.
    Recipe("efficientnet_b0", "torchvision", _tv("efficientnet_b0", stochastic_depth_prob=0.0),
           variants=(("torchscript", 15, None),), image=(3, 96, 96)),
    Recipe("squeezenet1_1", "torchvision", _tv("squeezenet1_1"),
           variants=(("torchscript", 16, None), ("dynamo", 21, None))),
    Recipe("shufflenet_v2_x0_5", "torchvision", _tv("shufflenet_v2_x0_5"),
           variants=(("torchscript", 17, None), ("torchscript", 18, 1))),
    Recipe("mnasnet0_5", "torchvision", _tv("mnasnet0_5"),
           variants=(("torchscript", 13, None), ("torchscript", 20, 1))),
    Recipe("regnet_y_400mf", "torchvision", _tv("regnet_y_400mf"),
           variants=(("torchscript", 17, None),)),
    Recipe("googlenet", "torchvision", _tv("googlenet", aux_logits=False, init_weights=True),
           variants=(("torchscript", 17, None),)),
    # its two auxiliary heads, which a training-mode export writes as outputs after the logits
    # (dlsuite runs the graph to the first: importer.first_output_only); 64 px: each head pools
    # to 4x4, which torch.onnx exports only from a multiple of it (4x4 at 64 px, 2x2 at 32)
    Recipe("googlenet_aux", "torchvision", _tv("googlenet", aux_logits=True, init_weights=True),
           variants=(("torchscript-train", 17, None),), image=(3, 64, 64)),
    Recipe("densenet_small", "torchvision", _tv_densenet,
           variants=(("torchscript", 17, None), ("dynamo", 18, None))),
    Recipe("convnext_small", "torchvision", _tv_convnext,
           variants=(("torchscript", 20, None), ("dynamo", 18, None))),
    Recipe("vit_small", "torchvision", _tv_vit,
           variants=(("torchscript", 17, None), ("torchscript", 17, 2))),
    Recipe("swin_small", "torchvision", _tv_swin, variants=(("torchscript", 17, None),)),
    Recipe("resnet_upsampler", "torchvision+torch.nn", _tv_fcn_like_upsampler,
           variants=(("torchscript", 19, None),)),
    Recipe("bert_tiny", "transformers", _hf_bert, tokens=True,
           variants=(("torchscript", 17, None), ("torchscript", 14, 1), ("dynamo", 18, None))),
    Recipe("distilbert_tiny", "transformers", _hf_distilbert, tokens=True,
           variants=(("torchscript", 17, None),)),
    Recipe("gpt2_tiny", "transformers", _hf_gpt2, tokens=True,
           variants=(("torchscript", 17, None), ("dynamo", 20, None))),
    Recipe("t5_tiny", "transformers", _hf_t5_encoder_decoder, tokens=True,
           variants=(("torchscript", 17, None),)),
)  # fmt: skip


def variant_name(architecture: str, exporter: str, opset: int, batch: int | None) -> str:
    """The corpus name of one export: architecture, exporter, opset, fixed batch or ``dyn``."""
    return f"{architecture}-{exporter}-op{opset}-{'b' + str(batch) if batch else 'dyn'}"


#: every export of the corpus by name, known without exporting
NAMES: tuple[str, ...] = tuple(
    variant_name(r.architecture, *variant) for r in RECIPES for variant in r.variants
)

#: the exports the conformance kit runs by default (CI): a fixed-batch CNN, a dynamic-batch CNN
#: from the dynamo exporter, a transformer encoder, a CNN exported in training mode. ``DLSUITE_CORPUS_ALL=1`` (``make corpus``)
#: runs every export; the kit's summary says how many it left out.
CI_SUBSET: tuple[str, ...] = (
    "shufflenet_v2_x0_5-torchscript-op18-b1",
    "squeezenet1_1-dynamo-op21-dyn",
    "bert_tiny-torchscript-op17-dyn",
    "mobilenet_v3_small-torchscript-train-op17-dyn",
)
assert set(CI_SUBSET) <= set(NAMES), sorted(set(CI_SUBSET) - set(NAMES))
ALL_ENV = "DLSUITE_CORPUS_ALL"


def whole_corpus() -> bool:
    """Whether the tests run every export (``DLSUITE_CORPUS_ALL=1``) or :data:`CI_SUBSET`."""
    return os.environ.get(ALL_ENV, "") not in ("", "0")


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in ("torch", "torchvision", "transformers", "onnx")}


def cache_key() -> str:
    text = Path(__file__).read_bytes() + json.dumps(_versions(), sort_keys=True).encode()
    return hashlib.sha256(text).hexdigest()[:16]


def _calibrate_batch_norms(model: Any, recipe: Recipe) -> None:
    """Running statistics measured on random inputs, as a trained network has its own.

    A fresh network's batch norms hold mean 0 and variance 1; exported in inference mode
    (where the exporter folds them into the convolutions) they normalise nothing, and in a
    deep narrow network the activations vanish (MobileNetV3's logits ~1e-8: a loss of exactly
    ln(classes) whatever the learning rate). Four batches in training mode, no gradient,
    cumulative averages (``momentum=None``)."""
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms or recipe.tokens:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum, m.saved_momentum = None, m.momentum
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.randn(8, *recipe.image))
    model.eval()
    for m in norms:
        m.momentum = m.saved_momentum
        del m.saved_momentum


def export_one(recipe: Recipe, exporter: str, opset: int, batch: int | None, out: Path) -> Entry:
    import torch

    torch.manual_seed(0)
    model = recipe.build().eval()
    with torch.no_grad():
        # Some libraries zero-initialise a layer (torchvision's ViT head): every logit would be
        # 0 and agreeing on them would check nothing. A trained network has no all-zero layer.
        for p in model.parameters():
            if p.dim() >= 2 and not p.any():
                torch.nn.init.normal_(p, std=0.05)
    _calibrate_batch_norms(model, recipe)
    b = batch or 2
    if recipe.tokens:
        x: Any = torch.randint(0, VOCAB, (b, SEQ))
        shape, kind = [SEQ], "int64"
    else:
        x = torch.randn(b, *recipe.image)
        shape, kind = list(recipe.image), "float"
    name = variant_name(recipe.architecture, exporter, opset, batch)
    path = out / f"{name}.onnx"
    if exporter in ("torchscript", "torchscript-train"):
        dyn = None if batch else {"input": {0: "batch"}, "logits": {0: "batch"}}
        mode = torch.onnx.TrainingMode.TRAINING if exporter.endswith("-train") else None
        torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=opset,
                          input_names=["input"], output_names=["logits"], dynamic_axes=dyn,
                          **({"training": mode, "do_constant_folding": False} if mode else {}))  # fmt: skip
    else:
        shapes = None if batch else ({0: torch.export.Dim("batch", min=1, max=1024)},)
        program = torch.onnx.export(model, (x,), dynamo=True, opset_version=opset,
                                    input_names=["input"], output_names=["logits"],
                                    dynamic_shapes=shapes, external_data=False)  # fmt: skip
        program.save(str(path), external_data=False)
    return Entry(name, recipe.architecture, recipe.library, exporter, opset, batch, path.name,
                 kind, shape, VOCAB if recipe.tokens else 0, CLASSES, True)  # fmt: skip


def generate(out: Path, only: Sequence[str] | None = None) -> list[Entry]:
    """Export every variant (or those named in ``only``) into ``out``; a variant whose export
    fails is reported in the manifest's ``failed`` list with the error (and fails the corpus
    tests that count them)."""
    out.mkdir(parents=True, exist_ok=True)
    entries, failed = [], []
    for recipe in RECIPES:
        for exporter, opset, batch in recipe.variants:
            name = variant_name(recipe.architecture, exporter, opset, batch)
            if only is not None and name not in only:
                continue
            try:
                entries.append(export_one(recipe, exporter, opset, batch, out))
            except Exception as exc:  # noqa: BLE001 - recorded with its message, counted by the tests
                failed.append({"architecture": recipe.architecture, "exporter": exporter,
                               "opset": opset, "batch": batch,
                               "error": f"{type(exc).__name__}: {str(exc)[:500]}"})  # fmt: skip
    manifest = {"versions": _versions(), "entries": [asdict(e) for e in entries], "failed": failed}
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(out / "manifest.json")
    return entries


def cache_root() -> Path:
    return Path(
        os.environ.get("DLSUITE_CORPUS_CACHE", Path.home() / ".cache" / "dlsuite" / "corpus")
    )


#: what exporting the corpus imports (the ``torch`` and ``corpus`` extras of pyproject.toml)
EXPORTERS = ("torch", "torchvision", "transformers", "onnxscript")
PYTHON_VAR = "DLSUITE_CORPUS_PYTHON"


class CorpusUnavailable(Exception):
    """No corpus folder was given and no interpreter here can export one; the message is the
    one line saying how to get one."""


def _can_export(python: str) -> bool:
    """Whether ``python`` imports every package of :data:`EXPORTERS` (asked without importing
    them, in that interpreter)."""
    if python == sys.executable:
        return all(importlib.util.find_spec(m) is not None for m in EXPORTERS)
    if not Path(python).exists():
        return False
    probe = "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))"
    return subprocess.run([python, "-c", probe, *EXPORTERS], capture_output=True).returncode == 0


def exporting_python() -> str:
    """An interpreter that can export the corpus: ``DLSUITE_CORPUS_PYTHON`` (which must be
    one), else the interpreter running this, else this checkout's .venv (``make venv`` gives it
    the ``torch`` and ``corpus`` extras). A framework's own environment (the conformance kit's)
    has none of them: it finds the .venv, or gets the one line saying how."""
    given = os.environ.get(PYTHON_VAR)
    if given:
        if not _can_export(given):
            raise CorpusUnavailable(
                f"{PYTHON_VAR}={given} cannot export the corpus: it needs {', '.join(EXPORTERS)} "
                f"(pip install -c containers/pytorch/requirements.txt -e '.[torch,corpus]')"
            )
        return given
    for candidate in (sys.executable, str(ROOT / ".venv" / "bin" / "python")):
        if _can_export(candidate):
            return candidate
    raise CorpusUnavailable(
        f"the ONNX corpus needs an interpreter with {', '.join(EXPORTERS)} to export it and "
        "none was found (in this interpreter or the checkout's .venv): run `make venv` "
        f"(builds .venv with them), or set {PYTHON_VAR}=<python with them> or "
        "DLSUITE_CORPUS=<exported folder>"
    )


def corpus_dir(python: str | None = None, only: Sequence[str] | None = None) -> Path:
    """The folder holding the exported corpus (every export, or at least those named in
    ``only``): ``DLSUITE_CORPUS`` when set, else generated (once per cache key) by ``python``
    (default: :func:`exporting_python`, which raises :class:`CorpusUnavailable` saying how to
    get one where none is found)."""
    given = os.environ.get("DLSUITE_CORPUS")
    if given:
        return Path(given)
    exe = python or exporting_python()
    argv = [exe, "-m", "tests.corpus", *(["--only", ",".join(only)] if only is not None else [])]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"corpus generation failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def load_manifest(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "manifest.json").read_text())
    return data


def main(argv: list[str]) -> int:
    import fcntl

    only: list[str] | None = None
    if argv[:1] == ["--only"]:
        only, argv = sorted(argv[1].split(",")), argv[2:]
        unknown = sorted(set(only) - set(NAMES))
        if unknown:
            print(f"not corpus exports: {unknown}", file=sys.stderr)
            return 2
    if argv:
        generate(Path(argv[0]), only)
        print(argv[0])
        return 0
    whole = cache_root() / cache_key()
    if only is not None and (whole / "manifest.json").is_file():
        print(whole)  # the whole corpus, exported before, has them
        return 0
    key = cache_key()
    if only is not None:  # a subset is cached in a folder of its own
        key += "-" + hashlib.sha256(",".join(only).encode()).hexdigest()[:8]
    folder = cache_root() / key
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test processes: one exports, the other waits
        if not (folder / "manifest.json").is_file():
            generate(folder, only)
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
