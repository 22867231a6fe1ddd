"""Operator sizes taken from a network: ``dlsuite run --level operator --sizes from:NETWORK``.

``NETWORK`` is a zoo network (``from:resnet50``), optionally with architecture fields
(``from:resnet18,resolution=224,width=4``), or a user's ONNX file (``from:path/model.onnx``).
The network is taken at the network level's own sizes for the run (``--quick`` or full; the
zoo network's size set and default batch, ``--batch`` for others), so an operator run and a
network-level run with the same flags see the same shapes. Every convolution, GEMM/linear,
normalisation, softmax, attention product and GELU of its graph becomes an operator task,
deduplicated, forward and (where training runs it) backward: :mod:`suite.onnx.operators`
does the walk. Host side and framework-free.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from suite.errors import ConfigError
from suite.params import SizeSpec

PREFIX = "from:"
_NAME = re.compile(r"^[A-Za-z0-9_]+$")


@dataclass(frozen=True)
class NetworkAtSize:
    """One network at one batch: what its operator tasks are taken from."""

    label: str
    model: onnx.ModelProto
    batch: int


def _typed(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse(text: str) -> tuple[str, dict[str, Any]]:
    """``from:NAME[,field=value...]`` or ``from:PATH.onnx`` -> (name or path, fields)."""
    if not text.startswith(PREFIX) or not text[len(PREFIX) :].strip():
        raise ConfigError(
            f"--sizes {text!r}: give from:NETWORK (a zoo network, e.g. from:resnet50, with "
            "optional fields: from:resnet18,resolution=224) or from:PATH.onnx (a model of yours)"
        )
    body = text[len(PREFIX) :].strip()
    if body.lower().endswith(".onnx"):
        return body, {}
    name, *pairs = (p.strip() for p in body.split(","))
    fields: dict[str, Any] = {}
    for pair in pairs:
        key, sep, val = pair.partition("=")
        if not sep or not _NAME.match(key.strip()) or not val.strip():
            raise ConfigError(
                f"--sizes {text!r}: {pair!r} is not field=value; write e.g. "
                f"from:{name},resolution=224,width=4"
            )
        fields[key.strip()] = _typed(val.strip())
    return name, fields


def networks(
    text: str, size_set: str, batches: list[int] | None, dims: str | None = None
) -> list[NetworkAtSize]:
    """The network(s) ``--sizes`` names, at the network level's sizes for ``size_set`` and
    its batches (or ``batches``); a user's file as ``--model`` runs it, its dynamic dimensions
    sized by ``dims`` (``--model-dims``) and its other inputs bound by name; a ConfigError
    naming ``--sizes`` and the fix otherwise."""
    try:
        return _networks(text, size_set, batches, dims)
    except ConfigError as exc:
        msg = str(exc)
        if msg.startswith("--sizes"):
            raise
        if msg.startswith("--model "):  # the user-model loader's own wording
            raise ConfigError("--sizes from:" + msg[len("--model ") :]) from None
        if msg.startswith("--model: "):  # fix_user_inputs': the file's inputs
            raise ConfigError(f"--sizes {text}: {msg[len('--model: ') :]}") from None
        raise ConfigError(f"--sizes {text}: {msg}") from None


def _networks(
    text: str, size_set: str, batches: list[int] | None, dims: str | None
) -> list[NetworkAtSize]:
    from suite.levels.network.workload import TRAIN_BATCHES, TRANSFORMER_FULL_BATCH, fixed_batch
    from suite.onnx import zoo

    name, fields = parse(text)
    if name.lower().endswith(".onnx"):
        path = str(Path(name).expanduser().resolve())
        model = zoo.load_user_model(path, field="--sizes from:")  # one clear error
        fixed = fixed_batch(model)
        chosen = [fixed] if fixed is not None else batches or ([4] if size_set == "quick" else [32])
        # each batch as the network level runs it: a transformers export's mask bound (for
        # that batch), its sequence sized
        sized = zoo.parse_dims(dims)
        return [NetworkAtSize(f"{Path(path).name} b{b}", zoo.as_run(model, sized, b).model, b)
                for b in chosen]  # fmt: skip
    net = zoo.get(name)  # unknown: a ConfigError listing the zoo
    out = []
    for spec in net.sizes(size_set):
        arch = net.validate({**spec.params, **fields})
        if batches:
            chosen = list(batches)
        elif name == "transformer" and size_set == "full" and arch.get("config") == "base":
            chosen = [TRANSFORMER_FULL_BATCH.get(arch.get("seq", 128), 8)]
        else:
            chosen = TRAIN_BATCHES[size_set].get(name, [4])
        shown = ", ".join(f"{k} {v}" for k, v in arch.items() if k in spec.params or k in fields)
        for b in chosen:
            out.append(NetworkAtSize(f"{name} ({shown}) b{b}", net.build(arch), b))
    return out


def size_specs(
    text: str, size_set: str, batches: list[int] | None, dims: str | None = None
) -> dict[str, list[SizeSpec]]:
    """Operator benchmark -> its sizes from the network(s) ``text`` names: every operator of
    the graph, forward and backward where training runs one, deduplicated; each says where it
    comes from and how many times the graph uses it."""
    from suite.onnx.importer import FixedSizeError
    from suite.onnx.operators import graph_operators

    out: dict[str, list[SizeSpec]] = {}
    seen: set[str] = set()
    for at in networks(text, size_set, batches, dims):
        try:
            ops = graph_operators(at.model, at.batch, training=True)
        except FixedSizeError as exc:  # the file's own size against the batch or dims asked
            given = f", --model-dims {dims}" if dims else ""
            raise ConfigError(f"--sizes {text} at batch {at.batch}{given}: {exc}") from None
        for bench, params, use in ops.tasks():
            key = f"{bench}:{sorted(params.items())}"
            if key in seen:
                continue
            seen.add(key)
            nodes = ", ".join(use.nodes[:3]) + (", ..." if len(use.nodes) > 3 else "")
            source = f"from {at.label}: {use.op} {use.shape}, {use.count} use(s) ({nodes})"
            out.setdefault(bench, []).append(SizeSpec(params, source))
    return out
