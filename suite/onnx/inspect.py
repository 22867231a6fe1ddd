"""``dlsuite inspect MODEL.onnx``: what the network level would make of a user's model, on the
host (onnx and NumPy only, no framework): its input and output shapes, the ops it uses before
and after the importer's folding, which adapters have a kernel for every op left, its
parameters and its FLOPs per sample."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from onnx import AttributeProto

from suite.errors import ConfigError, UnsupportedError
from suite.onnx.importer import ImportedGraph, Step, unsupported_op
from suite.onnx.ops import PRODUCTS


def step_flops(step: Step) -> int:
    """Floating-point operations of one step (a multiply-add counts 2) for the products (Conv,
    ConvTranspose, MatMul, Gemm, Einsum), whose work dominates a network; 0 for the others."""
    out = step.out_shapes[0] if step.out_shapes else None
    ins = step.in_shapes
    if out is None or not ins or ins[0] is None:
        return 0
    if step.op == "Conv" and len(ins) > 1 and ins[1] is not None:
        w = ins[1]
        return 2 * math.prod(out) * math.prod(w[1:])
    if step.op == "ConvTranspose" and len(ins) > 1 and ins[1] is not None:
        w = ins[1]
        return 2 * math.prod(ins[0]) * math.prod(w[1:])
    if step.op == "MatMul" and len(ins) > 1 and ins[1] is not None:
        return 2 * math.prod(out) * ins[0][-1]
    if step.op == "Gemm":
        k = ins[0][0] if step.attrs.get("transA") else ins[0][-1]
        return 2 * math.prod(out) * k
    if step.op == "Einsum" and all(s is not None for s in ins):
        eq = step.attrs["equation"]
        sizes: dict[str, int] = {}
        for term, shape in zip(eq.split("->")[0].split(","), ins, strict=False):
            assert shape is not None
            sizes.update(zip(term, shape, strict=False))
        return 2 * math.prod(sizes.values())
    return 0


def inspect_model(
    model: Any,
    adapters: dict[str, tuple[bool, frozenset[str]]],
    dims: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The inspection of ``model`` as ``dlsuite run --model`` runs it (``dims``: its
    ``--model-dims``); ``adapters`` maps a framework to (runs the network level, its declared
    ops), checked against the ops left to run after folding."""
    from suite.onnx.zoo import as_run

    stored = {n.name: n.type.tensor_type.elem_type for n in model.graph.input}
    ran = as_run(model, dims or {}, batch=None)
    graph = ImportedGraph(ran.model)
    batch = graph.fixed_batch or 1
    try:
        shape = graph.input_shape(batch)
    except ConfigError as exc:
        raise ConfigError(f"inspect: {exc}") from exc
    plan_error = None
    steps: list[Step] = []
    try:
        plan = graph.plan(shape)
        steps = plan.steps
        out_shape = plan.output_shape
    except UnsupportedError as exc:
        plan_error, out_shape = str(exc), None
    ops_after = sorted({s.op for s in steps})
    coverage = {}
    for name, (network, ops) in adapters.items():
        if not network:
            coverage[name] = {"runs": False, "missing": [], "why": "no network level"}
            continue
        walked = [(s.op, s.name) for s in steps]
        first = next(((op, node) for op, node in walked if op not in ops), None)
        rest = sorted({op for op, _ in walked} - ops - {first[0] if first else ""})
        missing = ([first[0]] if first else []) + rest
        coverage[name] = {
            "runs": plan_error is None and not missing,
            "missing": missing,
            "why": plan_error or (unsupported_op(*first) if first else ""),
        }
    params = sum(int(v.size) for v in graph.params.values())
    # weights the graph computes (Constant, ConstantOfShape: ONNX's backend-test "light"
    # models replace every initializer so) are constants, which ONNX training leaves alone
    computed = {n: plan.constants[n] for s in steps if s.op in PRODUCTS for n in s.inputs
                if n in plan.constants and n not in graph.constants
                and np.issubdtype(plan.constants[n].dtype, np.floating)} if steps else {}  # fmt: skip
    return {
        "input": {
            "name": graph.input_name,
            "dims": [d if d else "batch" for d in graph.input_dims],
            "dtype": str(np.dtype(_np_type(stored.get(graph.input_name, graph.input_type)))),
            "fixed_batch": graph.fixed_batch,
        },  # fmt: skip
        "output": {
            "name": graph.output_name,
            "shape_at_batch": list(out_shape) if out_shape else None,
            "batch": batch,
        },  # fmt: skip
        "inputs_bound": ran.bound,
        "upcast_from": ran.upcast_from,
        "rounded_from": ran.rounded_from,
        "training_export": ran.training_export,
        "opset": graph.opset,
        "nodes": len(graph.nodes),
        "ops_in_file": sorted({n.op_type for n in graph.nodes}),
        "ops_after_folding": ops_after,
        "steps_after_folding": len(steps),
        "plan_error": plan_error,
        "parameters": params,
        "outputs_left_out": ran.left_out.outputs if ran.left_out else [],
        "nodes_left_out": ran.left_out.nodes if ran.left_out else 0,
        "trainable_values_left_out": ran.left_out.trainable_values if ran.left_out else 0,
        "trainable_tensors": len(graph.params),
        "batchnorm_statistics": sum(int(v.size) for v in graph.state.values()),
        "inference_only": not graph.params,
        "computed_weights": len(computed),
        "computed_weight_values": sum(int(v.size) for v in computed.values()),
        "flops_per_sample": sum(step_flops(s) for s in steps) // batch,
        "ops_with_bodies": sorted(
            {
                n.op_type
                for n in ran.model.graph.node
                if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in n.attribute)
            }
        ),  # fmt: skip
        "frameworks": coverage,
    }


def _np_type(elem: int) -> Any:
    from onnx import helper

    return helper.tensor_dtype_to_np_dtype(elem)


def render(info: dict[str, Any]) -> str:
    """The inspection as text."""
    i, o = info["input"], info["output"]
    planned = not info["plan_error"]  # else nothing was folded or counted: say so, not zeros
    if not planned:
        out_shape = "shape unknown (not planned)"
    elif o["shape_at_batch"] is None:  # an op before it gives no shape (If, Loop)
        out_shape = "shape unknown (an op before it gives no shape)"
    else:
        out_shape = f"{o['shape_at_batch']} at batch {o['batch']}"
    # what If, Loop and Scan bodies hold is not walked: say so rather than print it as none
    bodies = info.get("ops_with_bodies") or []
    uncounted = f" (not counting the bodies of {', '.join(bodies)})" if bodies else ""
    lines = [
        f"input   {i['name']} {i['dims']} {i['dtype']}"
        + (f" (fixed batch {i['fixed_batch']})" if i["fixed_batch"] else " (dynamic batch)"),
        f"output  {o['name']} {out_shape}",
        f"opset   {info['opset']}; {info['nodes']} nodes, "
        + (f"{info['steps_after_folding']} after folding" if planned else "not planned"),
        f"params  {info['parameters']:,} trainable values in {info['trainable_tensors']} tensors"
        + (" (inference-only: nothing to train)" if info["inference_only"] and not bodies else "")
        + f"; {info['batchnorm_statistics']:,} batch-norm statistics{uncounted}",
        (
            f"FLOPs   {info['flops_per_sample'] / 1e9:.4g} GFLOP per sample (Conv, MatMul, Gemm, Einsum)"
            + uncounted
            if planned
            else "FLOPs   unknown (the graph could not be planned)"
        ),
        f"ops     {', '.join(info['ops_after_folding'] if planned else info['ops_in_file'])}",
    ]
    if info.get("computed_weights"):
        lines.insert(4,
            f"        {info['computed_weight_values']:,} more weight values in "
            f"{info['computed_weights']} tensors are computed by the graph, not initializers: "
            "constants, which training leaves as they are (no gradient, no update), so a train "
            "benchmark of this file times less than the network's training"
        )  # fmt: skip
    if info.get("inputs_bound"):
        lines.insert(1,
            "bound   " + ", ".join(f"{k} = {v}" for k, v in info["inputs_bound"].items())
            + " (the other inputs, bound by their names)"
        )  # fmt: skip
    if info.get("upcast_from"):
        lines.insert(2,
            f"stored  in {info['upcast_from']}: dlsuite runs the model in float32 (every "
            f"{info['upcast_from']} value is one), --dtype fp16/bf16 as mixed precision on it, "
            "and checks it against onnxruntime on the same float32 model"
        )  # fmt: skip
    if info.get("rounded_from"):
        lines.insert(2,
            f"stored  in {info['rounded_from']}: dlsuite runs the model in float32, its "
            f"{info['rounded_from']} weights and constants rounded to nearest, and checks it "
            "against onnxruntime on the same float32 model"
        )  # fmt: skip
    if info.get("outputs_left_out"):
        lines.insert(2,
            f"also    {', '.join(info['outputs_left_out'])}: not run (dlsuite runs the graph to "
            f"its first output, {o['name']}, which it trains and checks): "
            f"{info['nodes_left_out']} nodes and {info['trainable_values_left_out']:,} "
            "trainable values only they need are left out"
        )  # fmt: skip
    if info.get("training_export"):
        lines.insert(2,
            f"mode    exported in training mode ({len(info['training_export'])} "
            "BatchNormalization/Dropout nodes): dlsuite runs it as every network, batch "
            "statistics and dropout in the training step, running statistics and no dropout "
            "in inference and in the check against onnxruntime"
        )  # fmt: skip
    folded = sorted(set(info["ops_in_file"]) - set(info["ops_after_folding"]))
    if folded and planned:
        lines.append(f"folded  {', '.join(folded)} (constant for the input shape)")
    if not planned:
        lines.append(f"cannot run: {info['plan_error']}")
    if info.get("train_skips"):
        lines.append(f"train   skipped in every framework: {info['train_skips']}")
    lines.append("frameworks:")
    for name, cov in info["frameworks"].items():
        state = "runs" if cov["runs"] else f"skips: {cov['why']}"
        if cov["runs"] and info.get("train_skips"):
            state = "runs infer only (train skips: see above)"
        extra = f" (also lacks {', '.join(cov['missing'][1:])})" if len(cov["missing"]) > 1 else ""
        lines.append(f"  {name:20s} {state}{extra}")
    return "\n".join(lines)
