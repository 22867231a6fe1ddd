"""``dlsuite inspect MODEL.onnx``: a user's ONNX model: inputs, ops, which frameworks run it,
parameters, FLOPs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from suite.cli.common import ArgumentParser
from suite.cli.options import add_flag
from suite.errors import ConfigError, SuiteError
from suite.settings import setting


def add_parser(sub: Any, parsers: dict[str, ArgumentParser]) -> ArgumentParser:
    ins = sub.add_parser(
        "inspect",
        help="a user's ONNX model: inputs, ops, which frameworks run it, parameters, FLOPs",
    )
    ins.add_argument("model", metavar="MODEL.onnx", help="the ONNX file (as for --model)")
    ins.add_argument("--json", action="store_true", help="machine-readable output")
    add_flag(
        ins,
        setting("model_dims"),
        help="the sizes of MODEL.onnx's dynamic input dimensions other than the batch, by the "
        "names the file gives them (sequence=128 or height=224,width=224), as dlsuite run "
        "--model-dims runs it",
    )
    return ins


def main(args: argparse.Namespace, argv: list[str]) -> int:
    """Host side: onnx and NumPy only; the adapters' op lists are class attributes."""
    from suite.adapters import ADAPTERS
    from suite.levels.network import workload
    from suite.onnx import inspect, zoo

    model = zoo.load_user_model(args.model, field="")
    adapters = {}
    for name in ADAPTERS.names():
        try:
            cls = ADAPTERS.load(name)
        except SuiteError:
            continue
        network = "network" in cls.words and "network" in cls.levels
        adapters[name] = (network, frozenset(cls.onnx_ops))
    try:
        info = inspect.inspect_model(model, adapters, zoo.parse_dims(args.model_dims))
    except ConfigError as exc:  # the inputs' checks speak of --model, which inspect has not
        text = str(exc)
        if not text.startswith("--model: "):
            raise
        raise ConfigError(f"{args.model}: {text[len('--model: ') :]}") from None
    # what `train` and `data_parallel` would say of this file, from the class count they read
    classes = workload.model_input_spec(
        zoo.as_run(model, zoo.parse_dims(args.model_dims), None).model
    )[1]
    info["train_skips"] = workload.untrainable_output(classes)
    print(json.dumps(info, indent=2) if args.json else inspect.render(info))
    return 0
